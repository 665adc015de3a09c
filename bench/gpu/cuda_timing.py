"""CUDA-event timing shared by the GPU benchmarks' PyTorch peers
(attention_peer.py, kernel_peer.py)."""

import statistics

import torch


def median_ms(run, warmup, repeats):
    """The median milliseconds of `run` over `repeats` calls after
    `warmup`, each timed between two CUDA events on the current stream."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        run()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)
