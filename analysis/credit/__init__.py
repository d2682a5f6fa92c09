"""Credit-assignment accuracy: every estimator's step advantages against a ground truth.

The method (docs/credit.md; docs/design-notes.md "Credit-assignment ground truth"). With a
fixed policy pi and a deterministic environment (replaying an action prefix reproduces the
state: ALFWorld, WebShop, the toy corridor), the true advantage of a sampled step is

    A*(t) = Q(h_t, a_t) - V(h_t) = V(h_{t+1}) - V(h_t),    V(h) = P(success | h, then pi),

and each V is estimated by K continuations of pi from the replayed history (the step limit
counts from the episode's start; a terminal history's V is its outcome). ``g2po credit``
samples G task groups of N rollouts exactly as a training iteration does, continues every
distinct prefix K times (a fresh environment slot replays the prefix; the replayed observation
must equal the recorded one, else a one-line error names the task and step), and scores every
registered estimator and the ablation variants on the very same StepBatch: within-group
Spearman and Pearson correlation with A*, sign agreement on decisive steps (|A*| >= 0.2) and
the fraction of credit mass on them, each with a 95 % bootstrap CI over task groups, and paired
differences between estimators. The Monte-Carlo noise is measured, not assumed: a split-half
reliability (Spearman-Brown) of A*, per-step standard errors, and an oracle row that scores A*
of one half of the continuations against the other half. A lower-variance A* (pooling the
continuations by their first action) and the discounted A* are reported beside the plain
difference. On the toy corridor with a scripted policy of explicit probabilities, exact mode
computes V by dynamic programming instead.

Modules (one concept each):

- :mod:`~g2po_bench.analysis.credit.groundtruth`: prefixes of the sampled rows; A*, its SE,
  halves, the pooled and the discounted forms from continuation outcomes (numpy).
- :mod:`~g2po_bench.analysis.credit.exact`: exact values on the toy corridor (dynamic programming).
- :mod:`~g2po_bench.analysis.credit.variants`: the table of scored estimator variants and the
  one function that calls the estimator registry.
- :mod:`~g2po_bench.analysis.credit.scoring`: correlations, sign agreement, credit mass, CIs,
  paired differences, the oracle and the ceiling.
- :mod:`~g2po_bench.analysis.credit.replay`: the rollout hooks that continue recorded episodes
  (prefix replay, per-sample seeds, known ends, the state keys of both rules).
- :mod:`~g2po_bench.analysis.credit.study`: the phases of a study (rollouts, continuations,
  ground truth, scoring) on a policy and an environment pool.
- :mod:`~g2po_bench.analysis.credit.record`: ``credit.json`` (write and read).
- :mod:`~g2po_bench.analysis.credit.report`: the study's ``report.md`` and its section in
  ``g2po report``; :mod:`~g2po_bench.analysis.credit.figures`: scatter and bar charts.
- :mod:`~g2po_bench.analysis.credit.cli`: ``g2po credit`` (policy and config loading, outputs)
  and ``g2po bench credit`` (where the time goes).

Submodules are imported on use (torch only loads with the CLI's policy loading).
"""
