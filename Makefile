# agmm build. `make` builds the library, agmm-bench and the tests into $(BUILD);
# `make test` runs the CPU tests (no GPU needed); `make gputest` runs the GPU tests (skip loudly
# without a GPU). CUDA parts are built whenever nvcc is found (CUDA=0 leaves them out).
# `make install PREFIX=/opt/agmm` installs the header, the libraries, agmm.pc, the CMake package
# (lib/cmake/agmm: find_package(agmm), agmm::agmm) and agmm-bench; `make uninstall PREFIX=...`
# removes them.
#
#   make CUDA=0 BUILD=build-tsan SAN=thread test     # the CPU tests under ThreadSanitizer

BUILD   ?= build
NVCC    ?= $(shell command -v nvcc 2>/dev/null)
CUDA    ?= $(if $(NVCC),1,0)
SAN     ?=
CC      ?= cc

CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(realpath $(NVCC))),/usr/local/cuda)
# NCCL: headers and library must be the same version (the device API reads structs the
# library fills). NCCL_HOME points at a tree with include/ and lib/ (default: the CUDA toolkit's);
# its folders come before the toolkit's everywhere below, so that a toolkit that also holds an NCCL
# gives neither the headers nor, at run time, the library.
NCCL_HOME ?= $(CUDA_HOME)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CFLAGS  := -std=c11 -O2 -g -fPIC -D_GNU_SOURCE -Iinclude -Isrc $(WARN) -pthread
LDLIBS  := -pthread -lm
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -O1
LDFLAGS += -fsanitize=$(SAN)
endif

ifeq ($(CUDA),1)
CFLAGS  += -DAGMM_HAVE_CUDA -I$(NCCL_HOME)/include -I$(CUDA_HOME)/include
NVFLAGS := -std=c++17 -O3 -g -lineinfo -gencode=arch=compute_90a,code=sm_90a \
           -Iinclude -Isrc -I$(NCCL_HOME)/include -DAGMM_HAVE_CUDA \
           -Xcompiler -fPIC,-Wall,-Werror,-Wno-unused-parameter --Werror all-warnings
LDFLAGS += -Wl,--enable-new-dtags,-rpath,$(NCCL_HOME)/lib,-rpath,$(CUDA_HOME)/lib64
LDLIBS  += -L$(NCCL_HOME)/lib -L$(CUDA_HOME)/lib64 -lcudart_static -lcublasLt -l:libnccl.so.2 \
           -ldl -lrt -lstdc++
endif

# Sources by layer (docs/architecture.md), lowest first; kernels/gemm is the GEMM engine, part of
# the kernels layer (its kernel instantiations are several .cu files, so `make -j` builds them in
# parallel). Every C file builds everywhere: its GPU parts are under #ifdef AGMM_HAVE_CUDA. CUDA
# files (.cu) build only with CUDA.
SRC_DIRS := core cpu kernels kernels/gemm world symm backends api
LIB_C   := $(foreach l,$(SRC_DIRS),$(wildcard src/$(l)/*.c))
LIB_CU  := $(if $(filter 1,$(CUDA)),$(foreach l,$(SRC_DIRS),$(wildcard src/$(l)/*.cu)))
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.o)

TEST_C     := $(filter-out tests/test_process.c,$(wildcard tests/test_*.c)) tests/fault_scenario.c tests/harness.c \
              tests/arn_check.c
# One rank of a process world, started N times by tests/process_test.sh and fault_process_test.sh
# (and bench/process_run.sh).
PROCTEST_C := tests/test_process.c tests/fault_process.c tests/fault_scenario.c tests/test_cpu_backends.c \
              tests/proc_matmul_reduce.c tests/harness.c tests/arn_check.c
GPUTEST_C  := $(wildcard tests/gpu/*.c) tests/harness.c tests/arn_check.c
# Random steps on one world, every one checked (bench/soak.sh; a short run in make test).
SOAK_C     := tests/soak.c tests/soak_ops.c tests/soak_dev.c tests/arn_check.c tests/harness.c
BENCH_C    := $(wildcard tools/*.c)

.PHONY: all test gputest clean install uninstall
# With CUDA, the GPU tests and the GEMM lab too (bench/lab.mk), so that neither is ever older than
# the library it tests.
all: $(BUILD)/agmm-bench $(BUILD)/agmm-test $(BUILD)/agmm-proctest $(BUILD)/agmm-soak $(BUILD)/libagmm.so \
     $(if $(filter 1,$(CUDA)),$(BUILD)/agmm-gputest $(BUILD)/gemm-lab)

$(BUILD)/libagmm.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# ---- the shared library and its installation ----
# The version is agmm.h's; until 1.0 a minor version may change the ABI, so it is in the soname.
version = $(shell sed -n 's/^\#define AGMM_VERSION_$(1) \([0-9]*\)$$/\1/p' include/agmm.h)
VERSION := $(call version,MAJOR).$(call version,MINOR).$(call version,PATCH)
SONAME  := libagmm.so.$(call version,MAJOR).$(call version,MINOR)
PREFIX  ?= /usr/local

# Only agmm.h's functions are exported: the version script lists every agmm_* function the
# header declares (everything else, the CUDA runtime linked in included, stays local).
$(BUILD)/agmm.map: include/agmm.h
	@mkdir -p $(@D)
	{ echo 'AGMM_$(call version,MAJOR).$(call version,MINOR) {'; echo '  global:'; \
	  sed -n 's/^[a-z].*[ *]\(agmm_[a-z0-9_]*\)(.*/    \1;/p' $<; echo '  local: *;'; echo '};'; } >$@

# The shared library other programs (and the Python package) load.
$(BUILD)/libagmm.so: $(LIB_OBJ) $(BUILD)/agmm.map
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SONAME) -Wl,--version-script,$(BUILD)/agmm.map -o $@ $(LIB_OBJ) $(LDLIBS)

# pkg-config: `pkg-config --cflags --libs agmm` links the shared library; --static adds what
# libagmm.a needs (with CUDA: the CUDA runtime, cuBLASLt and NCCL of this build). A CUDA build's
# also gives the CUDA runtime's flags and defines AGMM_WITH_CUDA, for programs that move their
# own data to the GPU (examples/ do).
ifeq ($(CUDA),1)
PC_VARS   := cuda_home=$(CUDA_HOME)
PC_WHAT   :=
PC_CFLAGS := -I$${cuda_home}/include -DAGMM_WITH_CUDA
PC_LIBS   := -L$${cuda_home}/lib64 -Wl,-rpath,$${cuda_home}/lib64 -lcudart
else
PC_WHAT   := (built without CUDA: the CPU world only)
endif
define AGMM_PC
prefix=$(PREFIX)
libdir=$${prefix}/lib
includedir=$${prefix}/include
$(PC_VARS)

Name: agmm
Description: fused all-gather matmul and all-reduce for tensor-parallel models on NVLink GPUs $(PC_WHAT)
Version: $(VERSION)
Cflags: -I$${includedir} $(PC_CFLAGS)
Libs: -L$${libdir} -Wl,-rpath,$${libdir} -lagmm $(PC_LIBS)
Libs.private: $(LDFLAGS) $(LDLIBS)
endef
export AGMM_PC

# CMake: lib/cmake/agmm/agmmConfig.cmake defines the imported target agmm::agmm (cmake/*.in, filled
# in here with this build's version and CUDA).
CMAKE_DIR   := $(DESTDIR)$(PREFIX)/lib/cmake/agmm
CMAKE_SUBST := sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@SONAME@|$(SONAME)|g' \
               -e 's|@VERSION_MAJOR@|$(call version,MAJOR)|g' -e 's|@VERSION_MINOR@|$(call version,MINOR)|g' \
               -e 's|@CUDA@|$(if $(filter 1,$(CUDA)),ON,OFF)|g' -e 's|@CUDA_HOME@|$(if $(filter 1,$(CUDA)),$(CUDA_HOME))|g'

install: $(BUILD)/libagmm.so $(BUILD)/libagmm.a $(BUILD)/agmm-bench
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin $(CMAKE_DIR)
	install -m 644 include/agmm.h $(DESTDIR)$(PREFIX)/include/agmm.h
	install -m 755 $(BUILD)/libagmm.so $(DESTDIR)$(PREFIX)/lib/libagmm.so.$(VERSION)
	ln -sf libagmm.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libagmm.so
	install -m 644 $(BUILD)/libagmm.a $(DESTDIR)$(PREFIX)/lib/libagmm.a
	printf '%s\n' "$$AGMM_PC" >$(DESTDIR)$(PREFIX)/lib/pkgconfig/agmm.pc
	install -m 755 $(BUILD)/agmm-bench $(DESTDIR)$(PREFIX)/bin/agmm-bench
	$(CMAKE_SUBST) cmake/agmmConfig.cmake.in >$(CMAKE_DIR)/agmmConfig.cmake
	$(CMAKE_SUBST) cmake/agmmConfigVersion.cmake.in >$(CMAKE_DIR)/agmmConfigVersion.cmake

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/agmm.h $(DESTDIR)$(PREFIX)/lib/libagmm.so.$(VERSION) \
	      $(DESTDIR)$(PREFIX)/lib/$(SONAME) $(DESTDIR)$(PREFIX)/lib/libagmm.so $(DESTDIR)$(PREFIX)/lib/libagmm.a \
	      $(DESTDIR)$(PREFIX)/lib/pkgconfig/agmm.pc $(DESTDIR)$(PREFIX)/bin/agmm-bench \
	      $(CMAKE_DIR)/agmmConfig.cmake $(CMAKE_DIR)/agmmConfigVersion.cmake
	rmdir $(CMAKE_DIR) 2>/dev/null || true

$(BUILD)/agmm-bench: $(BENCH_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-test: $(TEST_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-proctest: $(PROCTEST_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-soak: $(SOAK_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/agmm-gputest: $(GPUTEST_C:%.c=$(BUILD)/%.o) $(BUILD)/libagmm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -MMD -MP -c -o $@ $<

test: $(BUILD)/agmm-test $(BUILD)/agmm-bench $(BUILD)/agmm-proctest $(BUILD)/agmm-soak $(BUILD)/libagmm.so \
      $(if $(filter 1,$(CUDA)),$(BUILD)/agmm-gputest)
	AGMM_BENCH=$(BUILD)/agmm-bench AGMM_PROCTEST=$(BUILD)/agmm-proctest AGMM_SOAK=$(BUILD)/agmm-soak \
	    AGMM_BUILD=$(BUILD) AGMM_CUDA=$(CUDA) \
	    ./tests/run.sh $(BUILD)/agmm-test

gputest: $(BUILD)/agmm-gputest
	$(BUILD)/agmm-gputest

clean:
	rm -rf build build-*

-include $(LIB_OBJ:.o=.d) $(wildcard $(BUILD)/tests/*.d $(BUILD)/tools/*.d $(BUILD)/tests/gpu/*.d)
include bench/lab.mk
