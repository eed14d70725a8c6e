/* The GEMM engine's tile configs: the one list (an X-macro) from which both the host's policy
 * table (policy.c) and the table of kernel instantiations (instantiate.cuh, one inst_*.cu per A
 * source and B layout) are built, so the two cannot disagree; and the measured policy table.
 *
 * X(bm, bn, stages, wgn, cluster, sk, pp, name), in index order (the index is what
 * agmm_gemm_desc.config and the lab's --configs name; append, never reorder):
 *   bm x bn  the output tile (K steps of 64)
 *   stages   ring slots of A + B
 *   wgn      how the two cooperative consumer warpgroups split the tile: 1 by rows (bm/2 each, one
 *            or two m64 wgmmas per K step of 16), 2 by columns (bm = 64 rows, bn/2 columns each);
 *            1 in ping-pong configs, where each consumer owns whole tiles
 *   cluster  2: pairs of CTAs on vertically adjacent tiles share B through TMA multicast
 *   sk       1: split tail: the tiles of the last waves are cut into K pieces that other SMs
 *            compute, summed through an fp32 workspace (policy.c, agmm_gemm_plan_split_tail;
 *            epilogue.cuh, sk_fixup); 2: stream-K tail (/stk): the K blocks of the last waves'
 *            tiles dealt evenly to every CTA, pieces summed the same way (stream_k.h)
 *   pp       1: ping-pong consumers (consumer.cuh): each warpgroup computes whole tiles, the two
 *            on alternate units, so one's epilogue runs under the other's mainloop; a whole
 *            tile's accumulators per thread (bm*bn/128: at most 176; 128 x 192's 192 spill in the
 *            consumers' 224 registers). No cluster or split tail (ping-pong pairs measured and not
 *            kept: docs/gemm_engine.md, "Multicast").
 * Of configs 10-20, measured 2026-12-05, each is the fastest on some of the 130 lab shapes (42 in
 * all), none alone beats 128 x 256: 256 x 192 in 3 stages (36 operand bytes per MMA cycle against
 * 128 x 256's 47; 192 accumulators per consumer thread; ptxas: no spills in its plain, chunks and
 * pull kernels, 20 bytes in the stream-K twin's and 612 in the scatter epilogue's: scatter mode
 * takes 256 x 128 instead, agmm_gemm_scatter_config) and 192 x 192 in 4 stages (43 B; each
 * consumer 192 rows by 96 columns, torch.matmul's fastest kernel on the large W = 8 rows is a
 * 192 x 192 one; a width per consumer that is not a multiple of 64: column-major B only,
 * config.cuh). The B-multicast pairs (/c2) run at 1.00-1.07x the time of the same tile without a
 * cluster since the consumers' remote arrive dropped .release.cluster (hopper_ptx.cuh; before:
 * 1.5-2.6x). Configs 21-25, pairs of 128 x 144, 160, 176, 192 and 112 (2026-12-06): the widths
 * between cuBLASLt's wave-fitted tiles, which alone starve on L2 (each reads 58-69 operand bytes per
 * MMA cycle where L2 gives ~40) and paired read 37-53; each CTA loads BN/2 rows of column-major B
 * (whole 8-row swizzle atoms for any width in 16s), row-major B only at 128-column multiples. On
 * an H100 they are the fastest config on 23 of the 130 lab shapes, and the fastest-per-shape
 * over all configs 0.4% faster with them (docs/results, seventeenth session). Configs 26-28, the
 * same widths 144, 160 and 176 without a cluster, in ping-pong (2026-12-06, twenty-fourth
 * session): on an H100 the fastest config on 51 of the 130 lab shapes, the fastest-per-shape over
 * all configs 1.074 -> 1.059 of best cuBLAS (128 x 112/pp won none and is not a config). Which
 * config runs a shape is the policy's (the two tables below; docs/gemm_engine.md). */
#ifndef AGMM_KERNELS_GEMM_CONFIGS_H
#define AGMM_KERNELS_GEMM_CONFIGS_H

#define AGMM_GEMM_CONFIGS(X)                        \
    X(128, 256, 4, 1, 1, 0, 0, "128x256x64/s4")     \
    X(128, 128, 6, 1, 1, 0, 0, "128x128x64/s6")     \
    X(128, 64, 8, 1, 1, 0, 0, "128x64x64/s8")       \
    X(128, 256, 4, 1, 2, 0, 0, "128x256x64/s4/c2")  \
    X(128, 128, 6, 1, 2, 0, 0, "128x128x64/s6/c2")  \
    X(128, 192, 5, 1, 1, 0, 0, "128x192x64/s5")     \
    X(256, 128, 4, 1, 1, 0, 0, "256x128x64/s4")     \
    X(64, 256, 5, 2, 1, 0, 0, "64x256x64/s5")       \
    X(64, 128, 8, 2, 1, 0, 0, "64x128x64/s8")       \
    X(128, 256, 4, 1, 1, 1, 0, "128x256x64/s4/sk")  \
    X(128, 128, 6, 1, 1, 0, 1, "128x128x64/s6/pp")  \
    X(64, 256, 5, 1, 1, 0, 1, "64x256x64/s5/pp")    \
    X(64, 128, 8, 1, 1, 0, 1, "64x128x64/s8/pp")    \
    X(64, 192, 6, 1, 1, 0, 1, "64x192x64/s6/pp")    \
    X(128, 256, 4, 1, 1, 2, 0, "128x256x64/s4/stk") \
    X(256, 128, 4, 1, 1, 2, 0, "256x128x64/s4/stk") \
    X(128, 128, 6, 1, 1, 2, 0, "128x128x64/s6/stk") \
    X(256, 192, 3, 1, 1, 0, 0, "256x192x64/s3")     \
    X(256, 192, 3, 1, 1, 2, 0, "256x192x64/s3/stk") \
    X(192, 192, 4, 2, 1, 0, 0, "192x192x64/s4")     \
    X(192, 192, 4, 2, 1, 2, 0, "192x192x64/s4/stk") \
    X(128, 144, 6, 1, 2, 0, 0, "128x144x64/s6/c2")  \
    X(128, 160, 5, 1, 2, 0, 0, "128x160x64/s5/c2")  \
    X(128, 176, 5, 1, 2, 0, 0, "128x176x64/s5/c2")  \
    X(128, 192, 5, 1, 2, 0, 0, "128x192x64/s5/c2")  \
    X(128, 112, 6, 1, 2, 0, 0, "128x112x64/s6/c2")  \
    X(128, 144, 6, 1, 1, 0, 1, "128x144x64/s6/pp")  \
    X(128, 160, 5, 1, 1, 0, 1, "128x160x64/s5/pp")  \
    X(128, 176, 5, 1, 1, 0, 1, "128x176x64/s5/pp")

/* The measured policy, one table per device kind (policy.h's agmm_gemm_device): X(rows, n, k,
 * "config name") per measured shape, the fastest config there. A plan whose shape lies near one of
 * them (policy.c, agmm_gemm_policy_measured) and that has the whole GPU takes that config; elsewhere
 * the cost model (AGMM_GEMM_FITTED_*, below) decides. To regenerate from a lab run on the GPU
 * machine:
 *     gemm-lab --configs all --csv lab.csv            (every config forced, every shape)
 *     python3 bench/gemm_ratio.py lab.csv --policy-table --device H100   (or H200)
 * and paste its rows here; check with the lab that the policy (config -1) then matches the
 * oracle line of gemm_ratio.py. Configs within about 2% of each other are within a run's noise.
 * H100 measured: 2026-12-06, one H100 80GB HBM3, `gemm-lab --configs all --reps 10` on the 31 seed
 * shapes at W = 1, 2, 4, 8 and the 6 model shapes, configs 0-28 and 128 x 112/s6/pp, GROUP_M 16
 * (docs/results/h100_2026-12-06i/lab_all_pp_widths_1.csv). A second run right after it
 * (lab_all_pp_widths_2.csv.xz) timed these picks at 1.063 of best cuBLAS (geomean over the 130
 * shapes), its own fastest-per-shape 1.060, the table before 1.080. One row changed since:
 * 6912 x 3456 x 3456 takes 192x192x64/s4, 5-13% faster than that run's pick (128x144x64/s6/pp) in
 * three later runs (docs/results/h100_2026-12-07e: lab_large_A.csv, lab_large_B.csv,
 * lab_pairs_192_256.csv). */
#define AGMM_GEMM_MEASURED_H100(X) \
    X(256, 256, 256, "64x128x64/s8") \
    X(384, 384, 384, "64x128x64/s8") \
    X(512, 256, 256, "64x128x64/s8") \
    X(512, 512, 512, "64x128x64/s8") \
    X(640, 640, 640, "64x128x64/s8") \
    X(768, 384, 384, "64x128x64/s8") \
    X(768, 768, 768, "128x64x64/s8") \
    X(896, 896, 896, "64x128x64/s8") \
    X(1024, 256, 256, "64x128x64/s8") \
    X(1024, 512, 512, "64x128x64/s8") \
    X(1024, 1024, 1024, "64x128x64/s8") \
    X(1152, 1152, 1152, "64x192x64/s6/pp") \
    X(1280, 640, 640, "64x128x64/s8") \
    X(1280, 1280, 1280, "128x128x64/s6") \
    X(1408, 1408, 1408, "128x128x64/s6") \
    X(1536, 384, 384, "64x128x64/s8") \
    X(1536, 768, 768, "64x192x64/s6/pp") \
    X(1536, 1536, 1536, "128x144x64/s6/pp") \
    X(1664, 1664, 1664, "128x192x64/s5") \
    X(1792, 896, 896, "128x128x64/s6") \
    X(1792, 1792, 1792, "128x256x64/s4") \
    X(1920, 1920, 1920, "128x256x64/s4") \
    X(2048, 256, 256, "64x128x64/s8") \
    X(2048, 512, 512, "64x128x64/s8") \
    X(2048, 1024, 1024, "128x128x64/s6") \
    X(2048, 2048, 2048, "128x256x64/s4") \
    X(2176, 2176, 2176, "128x160x64/s5/c2") \
    X(2304, 1152, 1152, "128x192x64/s5") \
    X(2304, 2304, 2304, "128x192x64/s5") \
    X(2432, 2432, 2432, "256x192x64/s3") \
    X(2560, 640, 640, "128x128x64/s6/pp") \
    X(2560, 1280, 1280, "128x256x64/s4") \
    X(2560, 2560, 2560, "128x144x64/s6/pp") \
    X(2688, 2688, 2688, "128x160x64/s5/pp") \
    X(2816, 1408, 1408, "128x256x64/s4") \
    X(2816, 2816, 2816, "128x256x64/s4") \
    X(2944, 2944, 2944, "128x176x64/s5/pp") \
    X(3072, 384, 384, "64x192x64/s6/pp") \
    X(3072, 768, 768, "128x192x64/s5") \
    X(3072, 1536, 1536, "192x192x64/s4") \
    X(3072, 3072, 3072, "128x192x64/s5") \
    X(3200, 3200, 3200, "128x160x64/s5/pp") \
    X(3328, 1664, 1664, "128x176x64/s5/pp") \
    X(3328, 3328, 3328, "128x176x64/s5/pp") \
    X(3456, 3456, 3456, "128x256x64/s4/sk") \
    X(3584, 896, 896, "64x128x64/s8/pp") \
    X(3584, 1792, 1792, "64x256x64/s5/pp") \
    X(3584, 3584, 3584, "128x256x64/s4") \
    X(3712, 3712, 3712, "128x176x64/s5/c2") \
    X(3840, 1920, 1920, "128x160x64/s5/pp") \
    X(3840, 3840, 3840, "128x176x64/s5/pp") \
    X(3968, 3968, 3968, "128x160x64/s5/pp") \
    X(4096, 512, 512, "64x256x64/s5") \
    X(4096, 1024, 1024, "64x256x64/s5/pp") \
    X(4096, 2048, 2048, "128x256x64/s4") \
    X(4096, 4096, 4096, "128x256x64/s4") \
    X(4352, 2176, 2176, "128x160x64/s5/pp") \
    X(4608, 1152, 1152, "128x176x64/s5/pp") \
    X(4608, 2304, 2304, "64x256x64/s5/pp") \
    X(4864, 2432, 2432, "128x144x64/s6/pp") \
    X(5120, 640, 640, "128x128x64/s6") \
    X(5120, 1280, 1280, "128x144x64/s6/pp") \
    X(5120, 2560, 2560, "128x160x64/s5/pp") \
    X(5376, 2688, 2688, "192x192x64/s4") \
    X(5632, 1408, 1408, "128x160x64/s5/pp") \
    X(5632, 2816, 2816, "128x192x64/s5/c2") \
    X(5888, 2944, 2944, "128x176x64/s5/pp") \
    X(6144, 768, 768, "64x192x64/s6/pp") \
    X(6144, 1536, 1536, "128x192x64/s5") \
    X(6144, 3072, 3072, "128x192x64/s5") \
    X(6400, 3200, 3200, "128x256x64/s4/c2") \
    X(6656, 1664, 1664, "128x256x64/s4/c2") \
    X(6656, 3328, 3328, "128x176x64/s5/pp") \
    X(6912, 3456, 3456, "192x192x64/s4") \
    X(7168, 896, 896, "128x128x64/s6/pp") \
    X(7168, 1792, 1792, "128x256x64/s4") \
    X(7168, 3584, 3584, "128x256x64/s4") \
    X(7424, 3712, 3712, "128x192x64/s5/c2") \
    X(7680, 1920, 1920, "128x176x64/s5/pp") \
    X(7680, 3840, 3840, "128x176x64/s5/pp") \
    X(7936, 3968, 3968, "128x160x64/s5/pp") \
    X(8192, 1024, 1024, "128x256x64/s4") \
    X(8192, 1792, 4096, "64x256x64/s5/pp") \
    X(8192, 2048, 2048, "128x256x64/s4/sk") \
    X(8192, 3584, 8192, "128x256x64/s4") \
    X(8192, 3696, 8192, "128x176x64/s5/pp") \
    X(8192, 4096, 1792, "128x256x64/s4") \
    X(8192, 4096, 4096, "64x256x64/s5/pp") \
    X(8192, 8192, 3584, "128x176x64/s5/pp") \
    X(8192, 8192, 3696, "128x256x64/s4/c2") \
    X(8704, 2176, 2176, "128x256x64/s4") \
    X(9216, 1152, 1152, "128x144x64/s6/pp") \
    X(9216, 2304, 2304, "128x256x64/s4") \
    X(9728, 2432, 2432, "128x144x64/s6/pp") \
    X(10240, 1280, 1280, "128x160x64/s5/pp") \
    X(10240, 2560, 2560, "128x160x64/s5/pp") \
    X(10752, 2688, 2688, "128x160x64/s5/pp") \
    X(11264, 1408, 1408, "128x176x64/s5/pp") \
    X(11264, 2816, 2816, "128x176x64/s5/pp") \
    X(11776, 2944, 2944, "128x176x64/s5/pp") \
    X(12288, 1536, 1536, "128x192x64/s5") \
    X(12288, 3072, 3072, "64x256x64/s5/pp") \
    X(12800, 3200, 3200, "128x160x64/s5/pp") \
    X(13312, 1664, 1664, "192x192x64/s4") \
    X(13312, 3328, 3328, "128x176x64/s5/pp") \
    X(13824, 3456, 3456, "128x144x64/s6/pp") \
    X(14336, 1792, 1792, "128x256x64/s4") \
    X(14336, 3584, 3584, "64x256x64/s5/pp") \
    X(14848, 3712, 3712, "128x144x64/s6/pp") \
    X(15360, 1920, 1920, "128x176x64/s5/pp") \
    X(15360, 3840, 3840, "128x176x64/s5/pp") \
    X(15872, 3968, 3968, "128x160x64/s5/pp") \
    X(16384, 2048, 2048, "128x256x64/s4") \
    X(16384, 4096, 4096, "128x160x64/s5/pp") \
    X(17408, 2176, 2176, "256x128x64/s4") \
    X(18432, 2304, 2304, "128x144x64/s6/pp") \
    X(19456, 2432, 2432, "128x144x64/s6/pp") \
    X(20480, 2560, 2560, "128x160x64/s5/pp") \
    X(21504, 2688, 2688, "128x160x64/s5/pp") \
    X(22528, 2816, 2816, "128x176x64/s5/pp") \
    X(23552, 2944, 2944, "128x176x64/s5/pp") \
    X(24576, 3072, 3072, "64x256x64/s5/pp") \
    X(25600, 3200, 3200, "128x160x64/s5/pp") \
    X(26624, 3328, 3328, "128x176x64/s5/pp") \
    X(27648, 3456, 3456, "128x144x64/s6/pp") \
    X(28672, 3584, 3584, "128x144x64/s6/pp") \
    X(29696, 3712, 3712, "256x128x64/s4") \
    X(30720, 3840, 3840, "128x160x64/s5/pp") \
    X(31744, 3968, 3968, "256x192x64/s3") \
    X(32768, 4096, 4096, "128x256x64/s4/sk")

/* H200 measured: 2026-12-06, one H200, `gemm-lab --configs all --reps 10` on the 31 seed shapes at
 * W = 1, 2, 4, 8 and the 6 model shapes, configs 0-28, GROUP_M 16 (bench/engine_lab.sh;
 * docs/results/h200_2026-12-06j/lab_all.csv). In that run the table before (measured on configs
 * 0-20 under GROUP_M 8) timed 1.099 of cuBLASLt's best of 16 (geomean over the 130 shapes), the
 * fastest config per shape 1.059: these picks are that oracle's, not yet timed in a run of their own. */
#define AGMM_GEMM_MEASURED_H200(X) \
    X(256, 256, 256, "64x128x64/s8") \
    X(384, 384, 384, "64x128x64/s8") \
    X(512, 256, 256, "64x128x64/s8/pp") \
    X(512, 512, 512, "64x128x64/s8") \
    X(640, 640, 640, "64x128x64/s8") \
    X(768, 384, 384, "64x128x64/s8/pp") \
    X(768, 768, 768, "64x128x64/s8") \
    X(896, 896, 896, "64x128x64/s8") \
    X(1024, 256, 256, "64x128x64/s8") \
    X(1024, 512, 512, "64x128x64/s8/pp") \
    X(1024, 1024, 1024, "64x128x64/s8") \
    X(1152, 1152, 1152, "64x192x64/s6/pp") \
    X(1280, 640, 640, "64x128x64/s8/pp") \
    X(1280, 1280, 1280, "128x128x64/s6") \
    X(1408, 1408, 1408, "128x128x64/s6") \
    X(1536, 384, 384, "64x128x64/s8") \
    X(1536, 768, 768, "64x192x64/s6/pp") \
    X(1536, 1536, 1536, "128x144x64/s6/pp") \
    X(1664, 1664, 1664, "128x192x64/s5") \
    X(1792, 896, 896, "128x128x64/s6") \
    X(1792, 1792, 1792, "64x128x64/s8/pp") \
    X(1920, 1920, 1920, "128x128x64/s6") \
    X(2048, 256, 256, "64x128x64/s8") \
    X(2048, 512, 512, "128x64x64/s8") \
    X(2048, 1024, 1024, "128x128x64/s6") \
    X(2048, 2048, 2048, "128x256x64/s4") \
    X(2176, 2176, 2176, "128x160x64/s5/pp") \
    X(2304, 1152, 1152, "128x192x64/s5") \
    X(2304, 2304, 2304, "128x176x64/s5/pp") \
    X(2432, 2432, 2432, "128x128x64/s6") \
    X(2560, 640, 640, "128x128x64/s6/pp") \
    X(2560, 1280, 1280, "128x256x64/s4") \
    X(2560, 2560, 2560, "128x144x64/s6/pp") \
    X(2688, 2688, 2688, "128x160x64/s5/pp") \
    X(2816, 1408, 1408, "128x256x64/s4") \
    X(2816, 2816, 2816, "128x160x64/s5/pp") \
    X(2944, 2944, 2944, "128x176x64/s5/pp") \
    X(3072, 384, 384, "64x192x64/s6/pp") \
    X(3072, 768, 768, "128x192x64/s5") \
    X(3072, 1536, 1536, "64x192x64/s6/pp") \
    X(3072, 3072, 3072, "128x192x64/s5") \
    X(3200, 3200, 3200, "128x160x64/s5/pp") \
    X(3328, 1664, 1664, "128x176x64/s5/pp") \
    X(3328, 3328, 3328, "128x176x64/s5/pp") \
    X(3456, 3456, 3456, "128x144x64/s6/pp") \
    X(3584, 896, 896, "64x128x64/s8/pp") \
    X(3584, 1792, 1792, "128x128x64/s6") \
    X(3584, 3584, 3584, "128x256x64/s4") \
    X(3712, 3712, 3712, "128x144x64/s6/pp") \
    X(3840, 1920, 1920, "128x160x64/s5/pp") \
    X(3840, 3840, 3840, "128x176x64/s5/pp") \
    X(3968, 3968, 3968, "128x160x64/s5/pp") \
    X(4096, 512, 512, "64x256x64/s5") \
    X(4096, 1024, 1024, "128x256x64/s4") \
    X(4096, 2048, 2048, "128x256x64/s4") \
    X(4096, 4096, 4096, "128x256x64/s4") \
    X(4352, 2176, 2176, "128x160x64/s5/pp") \
    X(4608, 1152, 1152, "128x176x64/s5/pp") \
    X(4608, 2304, 2304, "128x128x64/s6/pp") \
    X(4864, 2432, 2432, "128x144x64/s6/pp") \
    X(5120, 640, 640, "128x256x64/s4") \
    X(5120, 1280, 1280, "128x144x64/s6/pp") \
    X(5120, 2560, 2560, "128x160x64/s5/pp") \
    X(5376, 2688, 2688, "192x192x64/s4") \
    X(5632, 1408, 1408, "128x160x64/s5/pp") \
    X(5632, 2816, 2816, "128x160x64/s5/pp") \
    X(5888, 2944, 2944, "128x176x64/s5/pp") \
    X(6144, 768, 768, "64x192x64/s6/pp") \
    X(6144, 1536, 1536, "128x192x64/s5") \
    X(6144, 3072, 3072, "256x192x64/s3") \
    X(6400, 3200, 3200, "128x160x64/s5/pp") \
    X(6656, 1664, 1664, "128x176x64/s5/pp") \
    X(6656, 3328, 3328, "128x176x64/s5/pp") \
    X(6912, 3456, 3456, "128x160x64/s5/pp") \
    X(7168, 896, 896, "128x128x64/s6/pp") \
    X(7168, 1792, 1792, "128x256x64/s4") \
    X(7168, 3584, 3584, "128x128x64/s6/pp") \
    X(7424, 3712, 3712, "128x128x64/s6/pp") \
    X(7680, 1920, 1920, "128x176x64/s5/pp") \
    X(7680, 3840, 3840, "128x160x64/s5/pp") \
    X(7936, 3968, 3968, "128x160x64/s5/pp") \
    X(8192, 1024, 1024, "128x128x64/s6/pp") \
    X(8192, 1792, 4096, "64x256x64/s5/pp") \
    X(8192, 2048, 2048, "128x256x64/s4") \
    X(8192, 3584, 8192, "128x256x64/s4/sk") \
    X(8192, 3696, 8192, "128x144x64/s6/pp") \
    X(8192, 4096, 1792, "64x256x64/s5/pp") \
    X(8192, 4096, 4096, "64x256x64/s5/pp") \
    X(8192, 8192, 3584, "128x144x64/s6/pp") \
    X(8192, 8192, 3696, "128x176x64/s5/pp") \
    X(8704, 2176, 2176, "128x128x64/s6/pp") \
    X(9216, 1152, 1152, "128x128x64/s6/pp") \
    X(9216, 2304, 2304, "128x256x64/s4") \
    X(9728, 2432, 2432, "128x128x64/s6/pp") \
    X(10240, 1280, 1280, "128x160x64/s5/pp") \
    X(10240, 2560, 2560, "128x160x64/s5/pp") \
    X(10752, 2688, 2688, "128x160x64/s5/pp") \
    X(11264, 1408, 1408, "128x160x64/s5/pp") \
    X(11264, 2816, 2816, "128x160x64/s5/pp") \
    X(11776, 2944, 2944, "128x176x64/s5/pp") \
    X(12288, 1536, 1536, "128x128x64/s6/pp") \
    X(12288, 3072, 3072, "64x256x64/s5/pp") \
    X(12800, 3200, 3200, "128x128x64/s6/pp") \
    X(13312, 1664, 1664, "128x176x64/s5/pp") \
    X(13312, 3328, 3328, "128x176x64/s5/pp") \
    X(13824, 3456, 3456, "128x160x64/s5/pp") \
    X(14336, 1792, 1792, "128x256x64/s4") \
    X(14336, 3584, 3584, "64x256x64/s5/pp") \
    X(14848, 3712, 3712, "128x144x64/s6/pp") \
    X(15360, 1920, 1920, "128x176x64/s5/pp") \
    X(15360, 3840, 3840, "128x176x64/s5/pp") \
    X(15872, 3968, 3968, "128x160x64/s5/pp") \
    X(16384, 2048, 2048, "128x256x64/s4") \
    X(16384, 4096, 4096, "128x128x64/s6/pp") \
    X(17408, 2176, 2176, "128x128x64/s6/pp") \
    X(18432, 2304, 2304, "64x256x64/s5/pp") \
    X(19456, 2432, 2432, "128x128x64/s6/pp") \
    X(20480, 2560, 2560, "128x160x64/s5/pp") \
    X(21504, 2688, 2688, "128x128x64/s6/pp") \
    X(22528, 2816, 2816, "128x176x64/s5/pp") \
    X(23552, 2944, 2944, "128x176x64/s5/pp") \
    X(24576, 3072, 3072, "64x256x64/s5/pp") \
    X(25600, 3200, 3200, "128x128x64/s6/pp") \
    X(26624, 3328, 3328, "128x176x64/s5/pp") \
    X(27648, 3456, 3456, "128x160x64/s5/pp") \
    X(28672, 3584, 3584, "64x256x64/s5/pp") \
    X(29696, 3712, 3712, "128x128x64/s6/pp") \
    X(30720, 3840, 3840, "128x176x64/s5/pp") \
    X(31744, 3968, 3968, "128x160x64/s5/pp") \
    X(32768, 4096, 4096, "128x128x64/s6/pp")

/* The cost model (policy.c, agmm_gemm_policy_model), one table per device kind: X("config name", a,
 * b, c) per config it may choose. A run of the config costs waves x (a x BM x BN x K ps + b us) +
 * c us, waves being its tiles over the grid's CTAs, rounded up (a wave's multiply-adds, a wave's
 * fixed cost, the run's); the config of least cost is taken. A config with no row is chosen only by index (lab, tests) or
 * from the measured table. The coefficients are a least-squares fit of every forced config's time
 * over a lab run's shapes, on the relative error, b or c dropped (0) where it would come out
 * negative: they rank configs, they are not a device's rates. To regenerate from the lab run that
 * makes the measured table:
 *     python3 bench/policy_loo.py lab.csv --fit-table --device H100   (or H200)
 * and paste its rows here; `python3 bench/policy_loo.py lab.csv --fit` then shows the cost model
 * as good as "fitted on all shapes", and cross-validated (each half of the shapes judged by a fit
 * on the other) how it does on shapes it was not fitted on.
 * H100 fitted: the run of the measured table (docs/results/h100_2026-12-06i/lab_all_pp_widths_1.csv;
 * GROUP_M 16, configs 0-28). There, judged on the 130 shapes as if each were unmeasured, 1.079 of
 * best cuBLAS (geomean, cross-validated), the oracle 1.059.
 * H200 fitted: the run of the measured table (docs/results/h200_2026-12-06j/lab_all.csv; GROUP_M
 * 16, configs 0-28). There, judged on the 130 shapes as if each were unmeasured, 1.071 of best
 * cuBLAS (geomean, cross-validated; the model before it, fitted on the run of 2026-12-05, 1.097
 * on this one), the oracle 1.059. */
#define AGMM_GEMM_FITTED_H100(X) \
    X("128x256x64/s4", 0.3334, 1.384, 5.244) \
    X("128x128x64/s6", 0.3935, 0.000, 6.029) \
    X("128x64x64/s8", 0.6801, 0.000, 5.144) \
    X("128x256x64/s4/c2", 0.3415, 0.511, 6.862) \
    X("128x128x64/s6/c2", 0.3778, 0.000, 7.257) \
    X("128x192x64/s5", 0.3462, 0.632, 5.924) \
    X("256x128x64/s4", 0.3394, 1.850, 4.760) \
    X("64x256x64/s5", 0.3939, 0.716, 5.387) \
    X("64x128x64/s8", 0.5096, 0.000, 5.701) \
    X("128x256x64/s4/sk", 0.3307, 0.823, 7.242) \
    X("128x128x64/s6/pp", 0.3842, 0.000, 6.615) \
    X("64x256x64/s5/pp", 0.3783, 0.675, 5.940) \
    X("64x128x64/s8/pp", 0.5216, 0.000, 5.621) \
    X("64x192x64/s6/pp", 0.4454, 0.289, 5.573) \
    X("128x256x64/s4/stk", 0.3477, 1.428, 5.511) \
    X("256x128x64/s4/stk", 0.3463, 2.494, 4.574) \
    X("128x128x64/s6/stk", 0.3944, 0.420, 6.330) \
    X("256x192x64/s3", 0.3263, 4.630, 2.487) \
    X("256x192x64/s3/stk", 0.3351, 6.296, 2.369) \
    X("192x192x64/s4", 0.3285, 3.131, 4.126) \
    X("192x192x64/s4/stk", 0.3347, 2.936, 4.832) \
    X("128x144x64/s6/c2", 0.3748, 0.674, 7.198) \
    X("128x160x64/s5/c2", 0.3648, 0.583, 7.241) \
    X("128x176x64/s5/c2", 0.3608, 0.564, 7.274) \
    X("128x192x64/s5/c2", 0.3505, 0.000, 7.379) \
    X("128x112x64/s6/c2", 0.4359, 0.465, 7.037) \
    X("128x144x64/s6/pp", 0.3741, 0.439, 6.868) \
    X("128x160x64/s5/pp", 0.3536, 0.044, 7.334) \
    X("128x176x64/s5/pp", 0.3439, 0.535, 6.988) \

#define AGMM_GEMM_FITTED_H200(X) \
    X("128x256x64/s4", 0.3419, 0.636, 5.547) \
    X("128x128x64/s6", 0.3575, 0.000, 6.199) \
    X("128x64x64/s8", 0.5713, 0.000, 5.462) \
    X("128x256x64/s4/c2", 0.3444, 0.594, 6.230) \
    X("128x128x64/s6/c2", 0.3708, 0.000, 6.661) \
    X("128x192x64/s5", 0.3538, 0.000, 6.085) \
    X("256x128x64/s4", 0.3417, 1.176, 5.180) \
    X("64x256x64/s5", 0.3684, 0.962, 5.039) \
    X("64x128x64/s8", 0.4640, 0.000, 5.883) \
    X("128x256x64/s4/sk", 0.3351, 0.369, 7.196) \
    X("128x128x64/s6/pp", 0.3502, 0.000, 6.649) \
    X("64x256x64/s5/pp", 0.3618, 0.400, 6.256) \
    X("64x128x64/s8/pp", 0.4185, 0.000, 6.081) \
    X("64x192x64/s6/pp", 0.3802, 0.323, 5.922) \
    X("128x256x64/s4/stk", 0.3419, 1.321, 5.409) \
    X("256x128x64/s4/stk", 0.3374, 2.195, 4.806) \
    X("128x128x64/s6/stk", 0.3673, 0.461, 6.322) \
    X("256x192x64/s3", 0.3276, 3.886, 2.872) \
    X("256x192x64/s3/stk", 0.3205, 6.065, 2.662) \
    X("192x192x64/s4", 0.3384, 2.184, 4.733) \
    X("192x192x64/s4/stk", 0.3305, 2.728, 4.853) \
    X("128x144x64/s6/c2", 0.3727, 0.398, 6.770) \
    X("128x160x64/s5/c2", 0.3661, 0.407, 6.753) \
    X("128x176x64/s5/c2", 0.3615, 0.564, 6.655) \
    X("128x192x64/s5/c2", 0.3547, 0.000, 6.891) \
    X("128x112x64/s6/c2", 0.4214, 0.262, 6.760) \
    X("128x144x64/s6/pp", 0.3509, 0.000, 7.266) \
    X("128x160x64/s5/pp", 0.3443, 0.000, 7.234) \
    X("128x176x64/s5/pp", 0.3430, 0.000, 7.192) \

#endif /* AGMM_KERNELS_GEMM_CONFIGS_H */
