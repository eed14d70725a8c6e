# agmm build. `make` builds the library, agmm-bench and the tests into $(BUILD);
# `make test` runs the CPU tests (no GPU needed); `make gputest` runs the GPU tests (skip loudly
# without a GPU). CUDA parts are built whenever nvcc is found (CUDA=0 leaves them out).
#
#   make CUDA=0 BUILD=build-tsan SAN=thread test     # the CPU tests under ThreadSanitizer

BUILD   ?= build
NVCC    ?= $(shell command -v nvcc 2>/dev/null)
CUDA    ?= $(if $(NVCC),1,0)
SAN     ?=
CC      ?= cc

CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(realpath $(NVCC))),/usr/local/cuda)
# NCCL: headers and library must be the same version (the device API reads structs the
# library fills). NCCL_HOME points at a tree with include/ and lib/ (default: the CUDA toolkit's).
NCCL_HOME ?= $(CUDA_HOME)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CFLAGS  := -std=c11 -O2 -g -fPIC -D_GNU_SOURCE -Iinclude -Isrc $(WARN) -pthread
LDLIBS  := -pthread -lm
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -O1
LDFLAGS += -fsanitize=$(SAN)
endif

ifeq ($(CUDA),1)
CFLAGS  += -DAGMM_HAVE_CUDA -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include
NVFLAGS := -std=c++17 -O3 -g -lineinfo -gencode=arch=compute_90a,code=sm_90a \
           -Iinclude -Isrc -I$(NCCL_HOME)/include -DAGMM_HAVE_CUDA \
           -Xcompiler -fPIC,-Wall,-Werror,-Wno-unused-parameter --Werror all-warnings
LDFLAGS += -Wl,--enable-new-dtags,-rpath,$(CUDA_HOME)/lib64,-rpath,$(NCCL_HOME)/lib
LDLIBS  += -L$(CUDA_HOME)/lib64 -L$(NCCL_HOME)/lib -lcudart_static -lcublasLt -l:libnccl.so.2 \
           -ldl -lrt -lstdc++
endif

# Sources by layer (docs/architecture.md), lowest first. Every C file builds everywhere: its GPU
# parts are under #ifdef AGMM_HAVE_CUDA. CUDA files (.cu) build only with CUDA.
LAYERS  := core cpu kernels world symm backends api
LIB_C   := $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c))
LIB_CU  := $(if $(filter 1,$(CUDA)),$(foreach l,$(LAYERS),$(wildcard src/$(l)/*.cu)))
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.o)

TEST_C     := $(filter-out tests/test_process.c,$(wildcard tests/test_*.c)) tests/harness.c
# One rank of a process world, started N times by tests/process_test.sh (and bench/process_run.sh).
PROCTEST_C := tests/test_process.c tests/test_cpu_backends.c tests/harness.c
GPUTEST_C  := $(wildcard tests/gpu/*.c) tests/harness.c
BENCH_C    := $(wildcard tools/*.c)

.PHONY: all test gputest clean
all: $(BUILD)/agmm-bench $(BUILD)/agmm-test $(BUILD)/agmm-proctest $(BUILD)/libagmm.so \
     $(if $(filter 1,$(CUDA)),$(BUILD)/agmm-gputest)

$(BUILD)/libagmm.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The shared library other programs (and the Python package) load.
$(BUILD)/libagmm.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libagmm.so.$(shell sed -n 's/^#define AGMM_VERSION_MINOR \([0-9]*\)/0.\1/p' include/agmm.h) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-bench: $(BENCH_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-test: $(TEST_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-proctest: $(PROCTEST_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-gputest: $(GPUTEST_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -MMD -MP -c -o $@ $<

test: $(BUILD)/agmm-test $(BUILD)/agmm-bench $(BUILD)/agmm-proctest
	AGMM_BENCH=$(BUILD)/agmm-bench AGMM_PROCTEST=$(BUILD)/agmm-proctest ./tests/run.sh $(BUILD)/agmm-test

gputest: $(BUILD)/agmm-gputest
	$(BUILD)/agmm-gputest

clean:
	rm -rf build build-*

-include $(LIB_OBJ:.o=.d) $(wildcard $(BUILD)/tests/*.d $(BUILD)/tools/*.d $(BUILD)/tests/gpu/*.d)
include bench/lab.mk
