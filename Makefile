# attnd - an LLM inference daemon in C.   `make help` lists the targets.
#
# Variants (each builds into its own folder, so they never mix objects):
#   make                 release: -O2, portable x86-64 baseline; SIMD kernels chosen at run time
#   make VARIANT=debug   -O0 -g, for gdb
#   make VARIANT=asan    AddressSanitizer + UndefinedBehaviorSanitizer, for the hostile-input tests
#   make VARIANT=fuzz CC=clang fuzzers
#                        the library instrumented for libFuzzer (+ ASan/UBSan) and the harnesses in
#                        tests/fuzz (`make fuzz` builds and runs them; `make test` replays their corpora)

VARIANT ?= release
SHARED  ?= ../shared
CC      ?= cc
BUILD   := build/$(VARIANT)
# parallel compile jobs for `make test`, which builds three variants (release, asan, fuzz)
JOBS    ?= $(shell nproc)
VERSION := $(shell cat VERSION)

WARN    := -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wformat=2 -Wno-unused-parameter
CPPFLAGS += -D_GNU_SOURCE -Iinclude -I. -MMD -MP
CFLAGS_release := -O2 -g
CFLAGS_debug   := -O0 -g3
CFLAGS_asan    := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS_asan   := -fsanitize=address,undefined
CFLAGS_fuzz    := -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
                  -fno-sanitize-recover=undefined
LDFLAGS_fuzz   := -fsanitize=fuzzer,address,undefined
CFLAGS  += $(WARN) $(CFLAGS_$(VARIANT)) -pthread
LDFLAGS += $(LDFLAGS_$(VARIANT)) -pthread
LDLIBS  := -lmicrohttpd -lcjson -luring -lpcre2-8 -lvulkan -lzmq -lmsgpackc -lm

# Per-file instruction sets: only these files use them, behind a run-time CPU check.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
# quants_avx512.c alone also uses VNNI (cpu_kernels.c calls it only where the CPU has it)
$(BUILD)/obj/kernels/cpu/quants_avx512.o: AVX512_FLAGS += -mavx512vnni
# kernels_amx.c: the AMX tile unit (cpu_kernels.c calls it only where the CPU and the kernel allow it)
AMX_FLAGS := $(AVX512_FLAGS) -mavx512vnni -mavx512bf16 -mamx-tile -mamx-int8 -mamx-bf16

# server/cmd/ holds the subcommands (they print to stdout); everything else is the library: core/ (the
# bottom layer: status, log, check, utf8, the tensor type table), the kernels and the server's modules.
LIB_SRC := $(wildcard core/*.c) $(filter-out server/main.c server/cmd/%,$(wildcard server/*.c server/*/*.c)) \
           $(wildcard kernels/cpu/*.c) $(wildcard kernels/vulkan/*.c)
BIN_SRC := server/main.c $(wildcard server/cmd/*.c)
TEST_SRC := $(wildcard tests/unit/test_*.c)
BENCH_SRC := $(wildcard bench/*.c)
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)

# The playground page (web/*) is embedded in the library as a generated C file (tools/embed.sh).
WEB_FILES := $(sort $(wildcard web/*))
WEB_GEN   := $(BUILD)/gen/web_assets.c

# Vulkan compute shaders: GLSL compiled to SPIR-V at build time, embedded as uint32_t arrays in
# generated headers (build/<variant>/gen/spv_<name>.h) that kernels/vulkan/*.c include.
GLSLANG   ?= glslangValidator
VK_COMP   := $(sort $(wildcard kernels/vulkan/*.comp))
VK_SPV_H  := $(VK_COMP:kernels/vulkan/%.comp=$(BUILD)/gen/spv_%.h)
CPPFLAGS  += -I$(BUILD)/gen

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(WEB_GEN:%.c=$(BUILD)/obj/%.o)
BIN_OBJ := $(BIN_SRC:%.c=$(BUILD)/obj/%.o)
TESTS   := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCHES := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
FUZZERS := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
LIB     := $(BUILD)/libattnd.a
BIN     := $(BUILD)/attnd

.PHONY: all help deps test unit-test asan-test golden-test gguf-js-test bench run image image-test model clean fuzzers fuzz soak
all: $(BIN) $(TESTS) $(BENCHES) ## build attnd, the tests and the benchmarks (VARIANT=release|debug|asan)

help: ## this list
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/' | sort

deps: ## install the Debian packages the build and tests need (same script as .ci/run and Dockerfile)
	./deploy/install-deps.sh

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(AVX2_FLAGS) -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@
$(BUILD)/obj/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(AMX_FLAGS) -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The tuner's cache is valid for the kernels it timed: cpu_tune.c gets a hash of their sources and
# the variant, and is rebuilt when any of them changes.
KERNEL_SRCS := $(sort $(wildcard kernels/cpu/*.c kernels/cpu/*.h))
KERNELS_ID  := $(VARIANT)-$(shell cat $(KERNEL_SRCS) | md5sum | cut -c1-12)
$(BUILD)/obj/kernels/cpu/cpu_tune.o: CPPFLAGS += -DATTND_KERNELS_ID='"$(KERNELS_ID)"'
$(BUILD)/obj/kernels/cpu/cpu_tune.o: $(KERNEL_SRCS)

$(WEB_GEN): tools/embed.sh $(WEB_FILES) web
	@mkdir -p $(dir $@)
	sh tools/embed.sh $@ $(WEB_FILES)

$(BUILD)/gen/spv_%.h: kernels/vulkan/%.comp $(wildcard kernels/vulkan/*.glsl) kernels/vulkan/embed_spv.sh
	@mkdir -p $(dir $@)
	$(GLSLANG) -V --target-env vulkan1.2 -o $(@:.h=.spv) $<
	sh kernels/vulkan/embed_spv.sh $(@:.h=.spv) spv_$* >$@.tmp && mv $@.tmp $@

$(filter $(BUILD)/obj/kernels/vulkan/%,$(LIB_OBJ)): $(VK_SPV_H)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BIN_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(BIN_OBJ) $(LIB) $(LDLIBS)
	@ln -sf $(VARIANT)/attnd build/attnd-$(VARIANT)

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# test_faults fails the N-th allocation: the library's malloc/calloc/realloc calls go to its wrappers
$(BUILD)/tests/test_faults: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc

$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_common.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

fuzzers: $(FUZZERS) ## (with VARIANT=fuzz CC=clang) the libFuzzer harnesses of tests/fuzz

FUZZ_SECONDS ?= 60
fuzz: ## build the libFuzzer harnesses and run each for FUZZ_SECONDS (default 60); crashes land in tests/fuzz/regress/
	$(MAKE) VARIANT=fuzz CC=clang fuzzers
	$(MAKE) $(BUILD)/attnd
	SHARED=$(SHARED) ATTND=$(BUILD)/attnd ./tests/fuzz/run.sh fuzz $(FUZZ_SECONDS)

SOAK_SECONDS ?= 300
soak: ## 16 clients against a live daemon for SOAK_SECONDS (default 300); prints the figures (not in make test)
	$(MAKE) $(BIN)
	SHARED=$(SHARED) ATTND=$(BIN) nice -n 10 python3 tests/soak/soak.py $(SOAK_SECONDS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

test: ## build and run every test (unit, golden, hostile files under ASan, independent GGUF parser)
	./deploy/install-deps.sh
	$(MAKE) -j$(JOBS) all
	$(MAKE) -j$(JOBS) VARIANT=asan all
	$(MAKE) -j$(JOBS) VARIANT=fuzz CC=clang fuzzers
	SHARED=$(SHARED) ATTND=$(BUILD)/attnd ASAN_ATTND=build/asan/attnd ./tests/run.sh $(BUILD) build/asan

unit-test: all ## only the C unit tests of this variant
	SHARED=$(SHARED) ATTND=$(BUILD)/attnd ./tests/run.sh $(BUILD)

bench: all ## benchmarks: prints tables (models are generated under build/models)
	ATTND=$(BIN) ./bench/run.sh $(BUILD)

MODEL ?= models/kjv.gguf
run: ## build and start the daemon on the shipped model (models/kjv.gguf: trained by `make model`, committed)
	./deploy/install-deps.sh
	$(MAKE) $(BIN)
	$(BIN) serve --model $(MODEL)

TRAIN_MINUTES ?= 45
TRAIN_THREADS ?= 2
model: $(BIN) ## retrain models/kjv.gguf, its goldens and its card from the KJV text (tools/train; models/README.md)
	./deploy/install-deps.sh train
	/usr/bin/python3 -u tools/train/train.py --minutes $(TRAIN_MINUTES) --threads $(TRAIN_THREADS) $(TRAIN_ARGS)
	$(BIN) heads -m models/kjv.gguf --json > build/train/heads.json
	/usr/bin/python3 tools/train/card.py --census build/train/heads.json --notes tools/train/attempts.md

# The container image (Dockerfile): docker where a Docker engine answers, else buildah, with the
# Debian bases made by mmdebstrap when they cannot be pulled. The version is the file VERSION.
image: ## build the container image attnd:VERSION + attnd:latest (VERSION: the file); VULKAN_CPU=1: the -vulkan-cpu variant (Mesa's lavapipe)
	./deploy/install-deps.sh image
	./deploy/build-image.sh $(if $(filter 1,$(VULKAN_CPU)),--vulkan-cpu)

image-test: ## build the image, run it as uid 10001 with a model mounted, check it over HTTP against the host build (VULKAN_CPU=1: that variant)
	./deploy/install-deps.sh build
	./deploy/install-deps.sh image
	$(MAKE) $(BIN)
	$(MAKE) image
	SHARED=$(SHARED) ATTND=$(BIN) IMAGE_TAG=attnd:$(VERSION)$(if $(filter 1,$(VULKAN_CPU)),-vulkan-cpu) ./tests/image/test_image.py

clean: ## remove build outputs
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)
