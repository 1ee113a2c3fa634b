"""The fast paths: code that computes exactly what a plain torch expression computes, only faster on some
machine. Each kernel has a plain twin and a test that proves the two equal. The fused dropout and the label-smoothed
cross-entropy with a backward by hand (`dropout`, `loss`), and glibc's allocator kept from returning memory
(`memory`). Stands on `core` only."""
