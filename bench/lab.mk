# The GEMM kernel lab (bench/gemm_lab.cu): the engine against cuBLASLt and cuBLAS, per shape.
#   make gemm-lab && $(BUILD)/gemm-lab --w 8 --no-models --configs all   (gemm-lab --help: the options)
# Included from the Makefile; uses its $(BUILD), $(NVCC), $(NVFLAGS), $(LDLIBS) and %.cu rule.
ifeq ($(CUDA),1)
.PHONY: gemm-lab
gemm-lab: $(BUILD)/gemm-lab

$(BUILD)/gemm-lab: $(BUILD)/bench/gemm_lab.o $(BUILD)/bench/lab_cublas.o $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcublas   # cublasGemmEx: the lab's yardstick only

-include $(BUILD)/bench/gemm_lab.d $(BUILD)/bench/lab_cublas.d
endif

# Seven one-file experiments, each with its command and result in its header: does initcheck see
# cuBLASLt's stores (bench/initcheck_cublaslt.cu), do streams made and destroyed make two share
# a hardware queue (bench/stream_queues.cu), how fast a wgmma stream runs from shared memory
# alone (bench/wgmma_rate.cu), which SM (and GPC) each CTA of a launch lands on
# (bench/sm_placement.cu), what a launch of the small GEMMs' shapes costs between two events
# (bench/launch_floor.cu), how fast the GPU reads decode's weights with no GEMM at all
# (bench/hbm_read.cu), and whether CTAs in the engine's bounded wait slow the copy stream they wait
# for (bench/spin_copy.cu).
ifeq ($(CUDA),1)
.PHONY: initcheck-lab stream-queues wgmma-rate sm-placement launch-floor hbm-read spin-copy
initcheck-lab: $(BUILD)/initcheck-lab
stream-queues: $(BUILD)/stream-queues
wgmma-rate: $(BUILD)/wgmma-rate
sm-placement: $(BUILD)/sm-placement
launch-floor: $(BUILD)/launch-floor
hbm-read: $(BUILD)/hbm-read
spin-copy: $(BUILD)/spin-copy
$(BUILD)/initcheck-lab: $(BUILD)/bench/initcheck_cublaslt.o
$(BUILD)/stream-queues: $(BUILD)/bench/stream_queues.o
$(BUILD)/wgmma-rate: $(BUILD)/bench/wgmma_rate.o
$(BUILD)/sm-placement: $(BUILD)/bench/sm_placement.o
$(BUILD)/launch-floor: $(BUILD)/bench/launch_floor.o
$(BUILD)/hbm-read: $(BUILD)/bench/hbm_read.o
$(BUILD)/spin-copy: $(BUILD)/bench/spin_copy.o
$(BUILD)/initcheck-lab $(BUILD)/stream-queues $(BUILD)/wgmma-rate $(BUILD)/sm-placement $(BUILD)/launch-floor \
    $(BUILD)/hbm-read $(BUILD)/spin-copy:
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(BUILD)/bench/initcheck_cublaslt.d $(BUILD)/bench/stream_queues.d $(BUILD)/bench/wgmma_rate.d \
    $(BUILD)/bench/sm_placement.d $(BUILD)/bench/launch_floor.d $(BUILD)/bench/hbm_read.d \
    $(BUILD)/bench/spin_copy.d
endif
