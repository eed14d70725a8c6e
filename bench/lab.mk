# The GEMM kernel lab (bench/gemm_lab.cu): the engine against cuBLASLt, per shape.
#   make gemm-lab && $(BUILD)/gemm-lab --w 8 --no-models --configs all   (gemm-lab --help: the options)
# Included from the Makefile; uses its $(BUILD), $(NVCC), $(NVFLAGS), $(LDLIBS) and %.cu rule.
ifeq ($(CUDA),1)
.PHONY: gemm-lab
gemm-lab: $(BUILD)/gemm-lab

$(BUILD)/gemm-lab: $(BUILD)/bench/gemm_lab.o $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(BUILD)/bench/gemm_lab.d
endif

# Two one-file experiments, each with its command and result in its header: does initcheck see
# cuBLASLt's stores (bench/initcheck_cublaslt.cu), and do streams made and destroyed make two share
# a hardware queue (bench/stream_queues.cu).
ifeq ($(CUDA),1)
.PHONY: initcheck-lab stream-queues
initcheck-lab: $(BUILD)/initcheck-lab
stream-queues: $(BUILD)/stream-queues
$(BUILD)/initcheck-lab: $(BUILD)/bench/initcheck_cublaslt.o
$(BUILD)/stream-queues: $(BUILD)/bench/stream_queues.o
$(BUILD)/initcheck-lab $(BUILD)/stream-queues:
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(BUILD)/bench/initcheck_cublaslt.d $(BUILD)/bench/stream_queues.d
endif
