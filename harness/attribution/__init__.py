"""Attribution: where a run's drift comes from. Never imports harness.judge.

run_dumps       a run's token dumps read into per-sample rollout/train pairs
consistency     rollout vs trainer, field by field (identity, model state, sampling contract)
audit           the token-level dlogp audit (token-weighted and sample-mean views)
probe_context   worst tokens with their context, and what |dlogp| correlates with
probe_run       what a run declared: sampling contract, precision policy, TP size, tokenizer
probe_bundle    probe bundles: the fixed tensors of chosen samples
probe_contract  probe 6, the sampling contract
probe_numerics  probes 3, 4, 5 and 7, the LM-head boundary
probes          the seven probes and the drift class they decide
command         `python -m harness attribute RUN_DIR`
"""
