"""The VIME metric names the harness reads, spelled once. VIME logs them (and the embedded trainer
logs the same names); the judge, the report, the audit and the progress bar read them from here."""

ABS_DIFF = "train/train_rollout_logprob_abs_diff"  # the seed's primary mismatch metric (nats, sample mean)
RAW_REWARD = "rollout/raw_reward"
STEP_TIME = "perf/step_time"
