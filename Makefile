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
CFLAGS  := -std=c11 -O2 -g -D_GNU_SOURCE -Iinclude -Isrc $(WARN) -pthread
LDLIBS  := -pthread -lm
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -O1
LDFLAGS += -fsanitize=$(SAN)
endif

ifeq ($(CUDA),1)
CFLAGS  += -DAGMM_HAVE_CUDA -I$(CUDA_HOME)/include -I$(NCCL_HOME)/include
NVFLAGS := -std=c++17 -O3 -g -lineinfo -gencode=arch=compute_90a,code=sm_90a \
           -Iinclude -Isrc -I$(NCCL_HOME)/include -DAGMM_HAVE_CUDA \
           -Xcompiler -Wall,-Werror,-Wno-unused-parameter --Werror all-warnings
LDFLAGS += -Wl,--enable-new-dtags,-rpath,$(CUDA_HOME)/lib64,-rpath,$(NCCL_HOME)/lib
LDLIBS  += -L$(CUDA_HOME)/lib64 -L$(NCCL_HOME)/lib -lcudart_static -lcublasLt -l:libnccl.so.2 \
           -ldl -lrt -lstdc++
endif

# Sources by layer (design.md §3). What the CPU world needs builds everywhere; the rest of src
# (GPU backends, GPU world and heap, kernels) only with CUDA.
CPU_C   := $(wildcard src/core/*.c src/cpu/*.c) src/world/world.c src/symm/symm.c src/ops/plan.c src/ops/registry.c
ifeq ($(CUDA),1)
LIB_C   := $(CPU_C) $(filter-out $(CPU_C),$(wildcard src/world/*.c src/symm/*.c src/ops/*.c))
LIB_CU  := $(wildcard src/kernels/*.cu src/symm/*.cu)
else
LIB_C   := $(CPU_C)
LIB_CU  :=
endif
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.o)

TEST_C     := $(wildcard tests/test_*.c) tests/harness.c
GPUTEST_C  := $(wildcard tests/gpu/*.c) tests/harness.c
BENCH_C    := $(wildcard tools/*.c)

.PHONY: all test gputest clean
all: $(BUILD)/agmm-bench $(BUILD)/agmm-test $(if $(filter 1,$(CUDA)),$(BUILD)/agmm-gputest)

$(BUILD)/libagmm.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	ar rcs $@ $^

$(BUILD)/agmm-bench: $(BENCH_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-test: $(TEST_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-gputest: $(GPUTEST_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -MMD -MP -c -o $@ $<

test: $(BUILD)/agmm-test $(BUILD)/agmm-bench
	AGMM_BENCH=$(BUILD)/agmm-bench ./tests/run.sh $(BUILD)/agmm-test

gputest: $(BUILD)/agmm-gputest
	$(BUILD)/agmm-gputest

clean:
	rm -rf build build-*

-include $(LIB_OBJ:.o=.d) $(wildcard $(BUILD)/tests/*.d $(BUILD)/tools/*.d $(BUILD)/tests/gpu/*.d)
include bench/lab.mk
