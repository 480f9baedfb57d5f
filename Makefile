# dtrain: plain make. `make` builds build/dtrain; `make test` runs the tests;
# `make test SAN=1` under AddressSanitizer + UBSan; `make test TSAN=1` under
# ThreadSanitizer. Objects of each flavour go to their own build folder,
# which is rebuilt when its configuration changes (flags.stamp, below).
# `make EXTRA_CFLAGS=...` adds compiler flags; `make MPICC=false` builds
# without MPI.

CC      ?= cc
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
OPT     := -O3 -march=native -fno-math-errno
BLAS_INC := $(shell pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu)
LIBS    := -lopenblas -lz -lm -lpthread

# MPICC names Open MPI's compiler wrapper; `make MPICC=false` builds as if
# MPI were not installed.
MPICC      ?= mpicc
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null)
ifneq ($(MPI_LIBS),)
  HAVE_MPI := 1
endif

# oneDNN (libdnnl-dev) carries --precision bf16 (src/core/gemm_bf16.c); without
# it dtrain builds and refuses bf16. `make DNNL=0` builds as if it were absent.
DNNL ?= $(shell test -f /usr/include/oneapi/dnnl/dnnl.h && echo 1)
ifeq ($(DNNL),1)
  DNNL_CFLAGS := -DDTRAIN_HAVE_DNNL
  LIBS += -ldnnl -lgomp
endif

BUILD := build
ifeq ($(SAN),1)
  OPT   := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  BUILD := build-san
endif
ifeq ($(TSAN),1)
  OPT   := -O1 -g -fsanitize=thread
  BUILD := build-tsan
endif

CFLAGS  += $(CSTD) $(WARN) $(OPT) -Iinclude -Isrc $(BLAS_INC) $(DNNL_CFLAGS) $(EXTRA_CFLAGS)
LDFLAGS += $(filter -fsanitize=%,$(OPT))

LIB_SRC := $(sort $(wildcard src/core/*.c src/nn/*.c src/optim/*.c src/data/*.c \
             src/comm/*.c src/coll/*.c src/compress/*.c src/strategy/*.c src/report/*.c \
             src/strategy/*/*.c src/perf/*.c))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# Programs that tests/e2e_*.sh run under mpirun (not run directly by run.sh).
MPI_TEST_SRC := $(sort $(wildcard tests/mpi_*.c))
MPI_TEST_BIN := $(MPI_TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
# Fuzz targets: fuzz/fuzz_<name>.c, each defining LLVMFuzzerTestOneInput.
# `make test` replays fuzz/corpus/<name>/ through each with fuzz/replay.c
# (any C compiler); `make fuzz` builds the libFuzzer binaries (clang).
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_NAMES := $(FUZZ_SRC:fuzz/fuzz_%.c=%)
REPLAY_BIN := $(FUZZ_NAMES:%=$(BUILD)/fuzz/replay_%)

ifeq ($(HAVE_MPI),1)
  $(BUILD)/src/comm/mpi.o: CFLAGS += -DDTRAIN_HAVE_MPI $(MPI_CFLAGS)
  $(BENCH_BIN): CFLAGS += -DDTRAIN_HAVE_MPI $(MPI_CFLAGS)
  LIBS += $(MPI_LIBS)
endif

.PHONY: all test bench clean fuzz FORCE
all: $(BUILD)/dtrain $(TEST_BIN) $(MPI_TEST_BIN) $(BENCH_BIN) $(REPLAY_BIN)

# The configuration a build folder was made with, in a stamp file that every
# object and program depends on: rewritten only when the text changes (a
# compiler, a flag, MPI found or not), so a change of configuration rebuilds
# the folder and an unchanged one rebuilds nothing. (A build/ made before
# Open MPI was installed used to keep a dtrain built without MPI.)
# The text is expanded here, once (:=), so that no target-specific CFLAGS
# (mpi.o's, the benches') leaks into it.
# flags_stamp FILE VARIABLE: the recipe that writes the text of VARIABLE
# into FILE when it differs from what FILE holds.
define flags_stamp
	@mkdir -p $(dir $(1))
	@printf '%s\n' '$(subst ','\'',$($(2)))' >$(1).new; \
	if cmp -s $(1).new $(1); then rm -f $(1).new; \
	else [ ! -f $(1) ] || echo "$(1): the build configuration changed: rebuilding"; mv -f $(1).new $(1); fi
endef
FLAGS_STAMP  := $(BUILD)/flags.stamp
BUILD_CONFIG := CC=$(CC) | CFLAGS=$(CFLAGS) | LDFLAGS=$(LDFLAGS) | HAVE_MPI=$(HAVE_MPI) | \
                MPI_CFLAGS=$(MPI_CFLAGS) | MPI_LIBS=$(MPI_LIBS) | LIBS=$(LIBS)
$(FLAGS_STAMP): FORCE
	$(call flags_stamp,$@,BUILD_CONFIG)
FORCE:

$(BUILD)/%.o: %.c $(wildcard include/dtrain/*.h src/*/*.h src/*/*/*.h) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libdtrain.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/dtrain: $(CLI_OBJ) $(BUILD)/libdtrain.a $(FLAGS_STAMP)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libdtrain.a $(LIBS)

$(BUILD)/tests/%: tests/%.c tests/test.h $(BUILD)/libdtrain.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libdtrain.a $(LIBS)

# mpi_coll_check reuses the checks of test_coll.c.
$(BUILD)/tests/mpi_coll_check: tests/test_coll.c

$(BUILD)/bench/%: bench/%.c $(BUILD)/libdtrain.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libdtrain.a $(LIBS)

$(BUILD)/fuzz/replay_%: fuzz/fuzz_%.c fuzz/replay.c fuzz/util.c fuzz/fuzz.h $(BUILD)/libdtrain.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -DFUZZ_NAME='"$*"' -o $@ $< fuzz/replay.c fuzz/util.c $(BUILD)/libdtrain.a $(LIBS)

# The test runner runs every unit test binary, the end-to-end scripts and
# the fuzz corpus replays, then prints "N passed, N failed" (e2e_gpt_gemms.sh
# runs a bench binary: gpt_gemms).
test: $(BUILD)/dtrain $(TEST_BIN) $(MPI_TEST_BIN) $(REPLAY_BIN) $(BUILD)/bench/gpt_gemms
	@BUILD=$(BUILD) SAN=$(SAN) TSAN=$(TSAN) sh tests/run.sh

# ---- libFuzzer (clang): build-fuzz/fuzz_<name>, see docs/FUZZING.md --------
# The library is rebuilt with coverage instrumentation and ASan + UBSan
# (without MPI: no target reaches the transport's MPI backend).
FUZZ_CC     ?= clang
FUZZ_BUILD  := build-fuzz
FUZZ_CFLAGS := $(CSTD) $(WARN) -g -O1 -fno-omit-frame-pointer -Iinclude -Isrc $(BLAS_INC) \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIBS   := -lopenblas -lz -lm -lpthread
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
FUZZ_BIN    := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_STAMP  := $(FUZZ_BUILD)/flags.stamp
FUZZ_CONFIG := FUZZ_CC=$(FUZZ_CC) | FUZZ_CFLAGS=$(FUZZ_CFLAGS) | LIBS=$(FUZZ_LIBS)

fuzz: $(FUZZ_BIN)

$(FUZZ_STAMP): FORCE
	$(call flags_stamp,$@,FUZZ_CONFIG)

$(FUZZ_BUILD)/%.o: %.c $(wildcard include/dtrain/*.h src/*/*.h src/*/*/*.h fuzz/*.h) $(FUZZ_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/libdtrain.a: $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/fuzz/fuzz_%.o $(FUZZ_BUILD)/fuzz/util.o $(FUZZ_BUILD)/libdtrain.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(FUZZ_LIBS)

clean:
	rm -rf build build-san build-tsan build-fuzz
