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

# initcheck against cuBLASLt (bench/initcheck_cublaslt.cu: its header has the command and result).
ifeq ($(CUDA),1)
.PHONY: initcheck-lab
initcheck-lab: $(BUILD)/initcheck-lab

$(BUILD)/initcheck-lab: $(BUILD)/bench/initcheck_cublaslt.o
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(BUILD)/bench/initcheck_cublaslt.d
endif

# Streams and hardware queues (bench/stream_queues.cu: its header has the command and result).
ifeq ($(CUDA),1)
.PHONY: stream-queues
stream-queues: $(BUILD)/stream-queues

$(BUILD)/stream-queues: $(BUILD)/bench/stream_queues.o
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(BUILD)/bench/stream_queues.d
endif
