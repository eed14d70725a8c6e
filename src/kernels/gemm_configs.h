/* The GEMM engine's tile configs: the one list (an X-macro) from which gemm_engine.cu builds both
 * the host's policy table and the table of kernel instantiations, so the two cannot disagree;
 * and the measured policy table.
 *
 * X(bm, bn, stages, wgn, cluster, sk, pick, eff, name), in index order (the index is what
 * agmm_gemm_desc.config and the lab's --configs name; append, never reorder):
 *   bm x bn  the output tile (K steps of 64)
 *   stages   ring slots of A + B
 *   wgn      how the two consumer warpgroups split the tile: 1 by rows (bm/2 each, one or two
 *            m64 wgmmas per K step of 16), 2 by columns (bm = 64 rows, bn/2 columns each)
 *   cluster  2: pairs of CTAs on vertically adjacent tiles share B through TMA multicast
 *   sk       1: split tail: the tiles of the last waves are cut into K pieces that other SMs
 *            compute, summed through an fp32 workspace (gemm_engine.cu, plan_split_tail)
 *   pick     1: the cost model may choose it; 0: only by index (lab, tests) or by name from the
 *            measured table below
 *   eff      FLOP rate relative to 128x256 at full waves, for the cost model: 0.80 for 128x128
 *            measured with bench/gemm_lab on an H200, 0.60 for 128x64 estimated; the rest are
 *            guesses until measured. The numbers only rank configs against each other.
 * The B-multicast pairs (/c2) are correct but measured 1.3-1.5x slower than the same tile without
 * (docs/gemm_engine.md). Configs 5-9 are candidates, not yet measured (pick 0). */
#ifndef AGMM_KERNELS_GEMM_CONFIGS_H
#define AGMM_KERNELS_GEMM_CONFIGS_H

#define AGMM_GEMM_CONFIGS(X)                                      \
    X(128, 256, 4, 1, 1, 0, 1, 1.00, "128x256x64/s4")             \
    X(128, 128, 6, 1, 1, 0, 1, 0.80, "128x128x64/s6")             \
    X(128, 64, 8, 1, 1, 0, 1, 0.60, "128x64x64/s8")               \
    X(128, 256, 4, 1, 2, 0, 0, 1.00, "128x256x64/s4/c2")          \
    X(128, 128, 6, 1, 2, 0, 0, 0.80, "128x128x64/s6/c2")          \
    X(128, 192, 5, 1, 1, 0, 0, 0.90, "128x192x64/s5")             \
    X(256, 128, 4, 1, 1, 0, 0, 1.00, "256x128x64/s4")             \
    X(64, 256, 5, 2, 1, 0, 0, 0.70, "64x256x64/s5")               \
    X(64, 128, 8, 2, 1, 0, 0, 0.55, "64x128x64/s8")               \
    X(128, 256, 4, 1, 1, 1, 0, 1.00, "128x256x64/s4/sk")

/* The measured policy: X(rows, n, k, "config name") per measured shape, the fastest config there.
 * A plan whose shape lies near one of them (gemm_engine.cu, measured_config) and that has the
 * whole GPU takes that config; elsewhere the cost model picks among the pick = 1 configs. Empty
 * until measured. To regenerate from a lab run on the GPU machine:
 *     gemm-lab --configs all --csv lab.csv            (every config forced, every shape)
 *     python3 bench/gemm_ratio.py lab.csv --policy-table
 * and paste its rows here; check with the lab that the policy (config -1) then matches the
 * oracle line of gemm_ratio.py. */
#define AGMM_GEMM_MEASURED(X)

#endif /* AGMM_KERNELS_GEMM_CONFIGS_H */
