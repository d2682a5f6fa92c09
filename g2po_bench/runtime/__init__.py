"""The processes, signals and policy clients a run needs, whatever the benchmark or the trainer.

- :mod:`~g2po_bench.runtime.workers`: :class:`~g2po_bench.runtime.workers.EnvPool`, a
  benchmark's environments stepped in parallel worker processes (crashes restarted, workers
  recycled, signals ignored).
- :mod:`~g2po_bench.runtime.shutdown`: the signal policy of a training process and its workers
  (a stop request ends the iteration in flight, checkpoints, exits).
- :mod:`~g2po_bench.runtime.cpus`: the CPUs this process may use (affinity, Slurm, cgroup
  quota) and the thread limits of BLAS/OpenMP pools.
- :mod:`~g2po_bench.runtime.policy_protocol`: the :class:`~g2po_bench.runtime.policy_protocol.Policy`
  protocol (a batch of prompts in, :class:`~g2po_bench.runtime.policy_protocol.Generation` records
  out) that rollouts, evaluation and the prompting baselines call.
- :mod:`~g2po_bench.runtime.policies`: policy clients beyond the trainers' own samplers (an
  OpenAI-compatible endpoint, an in-process vLLM engine, token/time metering).

This layer sits above :mod:`g2po_bench.core` only (docs/design.md "Layers"): the benchmarks'
harness (rollout engine, evaluation, expert demonstrations) and the trainers import it, and it
imports no benchmark and no estimator; a pool is given the benchmark it runs.
"""
