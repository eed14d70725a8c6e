/* The GEMM engine's tile configs: the one list (an X-macro) from which gemm_engine.cu builds both
 * the host's policy table and the table of kernel instantiations, so the two cannot disagree.
 *
 * X(bn, stages, cluster, pick, eff, name), in index order (the index is what agmm_gemm_desc.config
 * and the lab's --config name; append, never reorder):
 *   bn       tile columns (the tile is 128 x bn x 64)
 *   stages   ring slots of A + B
 *   cluster  2: pairs of CTAs on vertically adjacent tiles share B through TMA multicast
 *   pick     1: the policy may choose it; 0: only by index (lab, tests)
 *   eff      FLOP rate relative to 128x256 at full waves, for the policy's cost model: 0.80 for
 *            128x128 measured with bench/gemm_lab on an H200, 0.60 for 128x64 estimated. The
 *            numbers only rank configs against each other.
 * The B-multicast pairs (/c2) are correct but measured 1.3-1.5x slower than the same tile without
 * (docs/gemm_engine.md), so only the lab and the tests select them. */
#ifndef AGMM_KERNELS_GEMM_CONFIGS_H
#define AGMM_KERNELS_GEMM_CONFIGS_H

#define AGMM_GEMM_CONFIGS(X)                   \
    X(256, 4, 1, 1, 1.00, "128x256x64/s4")     \
    X(128, 6, 1, 1, 0.80, "128x128x64/s6")     \
    X(64, 8, 1, 1, 0.60, "128x64x64/s8")       \
    X(256, 4, 2, 0, 1.00, "128x256x64/s4/c2")  \
    X(128, 6, 2, 0, 0.80, "128x128x64/s6/c2")

#endif /* AGMM_KERNELS_GEMM_CONFIGS_H */
