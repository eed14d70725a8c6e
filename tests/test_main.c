/* The CPU test binary: every case of the CPU test files. `agmm-test [FILTER]` runs the cases
 * whose name contains FILTER; the last line is "N passed, N failed, N skipped". */
#include "cpu_tests.h"
#include "harness.h"

static const agmm_test_case cases[] = {
    {"schedule/edges", test_schedule_edges},
    {"schedule/random", test_schedule_random},
    {"validate/ag_matmul", test_validate_ag_matmul},
    {"validate/all_reduce", test_validate_all_reduce},
    {"validate/plan_api", test_validate_plan_api},
    {"validate/run_io", test_validate_run_io},
    {"validate/run_misuse", test_validate_run_misuse},
    {"validate/host_order", test_validate_host_collective_order},
    {"backends/table", test_backend_table},
    {"backends/queries", test_backend_queries},
    {"backends/limits", test_backend_limits},
    {"cpu/reference", test_cpu_reference},
    {"cpu/ag_matmul/exact", test_cpu_ag_matmul_exact},
    {"cpu/ag_matmul/random", test_cpu_ag_matmul_random},
    {"cpu/all_reduce", test_cpu_all_reduce},
    {"cpu/auto", test_cpu_auto_backend},
    {"cpu/matmul_reduce/exact", test_matmul_reduce_exact},
    {"cpu/matmul_reduce/random", test_matmul_reduce_random},
    {"cpu/matmul_reduce/auto", test_matmul_reduce_auto},
    {"cpu/matmul_reduce/rows", test_matmul_reduce_rows},
    {"cpu/matmul_reduce/bad_args", test_matmul_reduce_bad_args},
    {"cpu/fused/waits", test_cpu_fused_waits},
    {"cpu/timeout/missing_rank", test_cpu_timeout_missing_rank},
    {"cpu/timeout/chunk", test_cpu_timeout_chunk},
    {"cpu/symmetric_input", test_symmetric_input},
    {"ownership/late_rank", test_ownership_late_rank},
    {"ownership/agreement", test_ownership_agreement},
    {"messages/truncation", test_messages_truncation},
    {"messages/log_whole", test_messages_log_whole},
    {"messages/words", test_messages_words},
    {"plan/host_memory", test_plan_host_memory},
    {"plan/memory_check", test_plan_memory_check},
    {"plan/agreement", test_plan_agreement},
    {"fault/spec", test_fault_spec},
    {"fault/any_rank", test_fault_any_rank},
    {"fault/matrix", test_fault_matrix},
    {"steps/back_to_back", test_steps_back_to_back},
    {"leaks/plan_cycles", test_leaks_plan_cycles},
    {"leaks/world_cycles", test_leaks_world_cycles},
    {"cpu/pull/late_ready", test_pull_late_ready},
    {"cpu/pull/slow_reader", test_pull_slow_reader},
    {"cpu/pull/timeouts", test_pull_timeouts},
    {"tune/cache_file", test_tune_cache_file},
    {"tune/measured", test_tune_measured},
    {"tune/agreement", test_tune_agreement},
    {"tune/off", test_tune_off},
    {"tune/op_types", test_tune_op_types},
    {"knobs/table", test_knobs_table},
    {"knobs/values", test_knobs_values},
    {"knobs/worlds", test_knobs_worlds},
};

int main(int argc, char **argv)
{
    return agmm_test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc > 1 ? argv[1] : NULL);
}
