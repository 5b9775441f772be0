"""The harness's own data-layout code, mirroring how VIME / slime / Megatron lay out data.

One small module per layout step; each module's docstring names the VIME behaviour it mirrors,
and tests/properties/ checks each with hypothesis:

    token_shift        logit t predicts token t+1; response slice; loss-mask alignment
    packing            THD packing with cu_seqlens, and unpacking
    dynamic_batching   micro-batches under --max-tokens-per-gpu
    partitioning       --balance-data (Karmarkar-Karp) and round-robin DP splits
    context_parallel   zigzag 2*CP chunk split, its inverse, CP-sliced response log-probs
    vocab_parallel     vocab sharding and the log-sum-exp merge (native / fixed-order)
    sample_mean        VIME's sample-mean reduction of |dlogp| (the logged abs-diff)
"""
