"""Events, checkpoint scans and the attempt ledger -> the status fields the reporter owns.

Pure apart from the injected clock; not thread-safe (the caller holds a lock).

Ids: miles restarts every attempt at rollout 0 (see launcher.py), so an attempt that resumed
after ``offset`` rollouts prints local ids; every rollout, eval and checkpoint id is shown as
``local + offset`` (step numbers as ``local + offset * steps_per_rollout``). If the trainer
turns out to continue at the resumed iteration itself (its first rollout id is >= offset), its
ids are taken as they are; either way the first id is logged once (``notes``).

When a rollout counts as finished (``progress.rollout`` = highest finished id + 1):
* a ``step`` line while it is the rollout being trained (the latest ``rollout`` line; without
  one, ``step n`` finishes rollout n // steps_per_rollout);
* its train-timings ``perf`` line (no 'rollout/' keys), printed after its training;
* ``rollout r+1`` (printed when r+1 starts) finishes r;
* a complete checkpoint of iteration N finishes N (this makes a resumed run right at once).

Metrics are rounded to 4 significant digits (``rounding``); NaN/inf are never sent as values.
A watched metric (WATCHED_FINITE) that is NaN/inf is recorded instead in ``metrics.nonFinite``:
its key (a status key), NaN/Inf/-Inf, the first and latest rollout and how many in a row (a
second line of the same rollout, e.g. ``perf`` after ``rollout``, is not counted twice; a
finite value clears it). The operator judges it (control/health.py).

Across attempts (the ledger, see attempts.py): GPU time and trained rollouts add up; evals and
logprob diffs of earlier attempts count for the rollouts this attempt builds on (those before
its offset), so ``best`` and the diff mean cover the whole lineage of the adapter.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, TypeGuard

from . import attempts, checkpoints
from . import statuskeys as K
from .history import Curve
from .logparse import Event, eval_scores
from .rounding import significant
from .text import printable

# status key -> source metric key ('latest value' metrics)
METRIC_SOURCES = (
    (K.RAW_REWARD, "rollout/raw_reward"),
    (K.LOGPROB_DIFF, "train/train_rollout_logprob_abs_diff"),
    (K.KL, "train/ppo_kl"),
    (K.LOSS, "train/loss"),
    (K.RESPONSE_LENGTH_MEAN, "rollout/response_len/mean"),
    (K.TRUNCATED_RATIO, "rollout/truncated_ratio"),
)
DIFF_KEY = "train/train_rollout_logprob_abs_diff"
# the metrics whose NaN/inf is recorded (status.metrics.nonFinite): a diverged run says so
# instead of looking quiet (its value fields keep the last finite value)
WATCHED_FINITE = ((K.RAW_REWARD, "rollout/raw_reward"), (K.LOSS, "train/loss"), (K.LOGPROB_DIFF, DIFF_KEY))
MAX_STREAK = 1_000_000_000  # the CRD's bound (api.types.NonFiniteMetric)


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


MAX_URL = 512  # status.tracking.wandbRunURL's maxLength (api.types.TrackingStatus)


class Summary:
    def __init__(
        self,
        total_rollouts: int,
        *,
        offset: int = 0,
        attempt: int = 1,
        steps_per_rollout: int = 1,
        history: list | None = None,
        eval_names: frozenset | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.total = max(0, int(total_rollouts))
        self.offset = max(0, int(offset))
        self.attempt = max(1, int(attempt))
        self.steps_per_rollout = max(1, int(steps_per_rollout))
        self._clock = clock
        self.eval_names = eval_names  # None: every eval set the log names
        # earlier attempts (ledger records): the rollouts they trained (their GPU-hours are the
        # operator's, from the pods: control/gpuhours.py)
        earlier = [r for r in (history or []) if r.get("attempt", 0) < self.attempt]
        self._earlier_trained = sum(attempts.trained(r) for r in earlier)
        self._eval_history: list = []  # (rollout, {name: score}) of this attempt, for the ledger
        self.notes: list = []  # one-off messages for the job log
        self._id_offset = self.offset  # added to the trainer's rollout ids
        self._first_id_seen = False
        self._finished = self.offset - 1  # highest finished rollout (global)
        self._first: tuple | None = None  # (time, rollout) of the first finish in this attempt
        self._last: tuple | None = None
        self._training: int | None = None  # global id of the latest 'rollout' line
        self._step: int | None = None
        self._metrics: dict = {}
        self._non_finite: dict = {}  # status key -> {metric, value, rollout, streak}
        self._diffs: dict = {}  # global step -> finite train_rollout_logprob_abs_diff
        # their exact sum, kept as they come, so that the mean costs the same at step 10 and
        # 10,000 (float() of it is the correctly rounded sum, as math.fsum gives)
        self._diff_sum = Fraction(0)
        self._evals: dict = {}
        # status.history: decimated curves over rollouts (reward, logprob diff, each eval set)
        self._reward_curve = Curve()
        self._diff_curve = Curve()
        self._eval_curves: dict = {}
        self._logged_saves: dict = {}  # local iteration -> path (this attempt's 'Saving LoRA' lines)
        self._megatron_saves: dict = {}  # local iteration -> path (Megatron's 'successfully saved')
        self._log_done_local = -1  # highest local iteration the log proves finished
        self._saves_epoch = 0  # bumped when a save is logged or scanned: the verdict is kept till then
        self._verdict_key: tuple | None = None
        self._verdict: dict | None = None
        self._saves: list | None = None  # the last scan
        self._save_dir: str | None = None
        self.wandb_url: str | None = None
        self._seed_from(earlier)
        self.version = 1
        self._updated = clock()
        self._core = self._compute()

    def _seed_from(self, earlier: list) -> None:
        """Evals and logprob diffs of earlier attempts, for the rollouts this attempt builds on:
        an entry of attempt j at rollout r counts when every later attempt resumed after r."""
        later_offsets = [self.offset]
        for record in sorted(earlier, key=lambda r: r["attempt"], reverse=True):
            limit = min(later_offsets)
            for rollout, scores in _pairs(record.get("evals")):
                if rollout < limit and isinstance(scores, dict):
                    self._fold_eval(int(rollout), {f"eval/{k}": v for k, v in scores.items() if _finite(v)}, keep=False)
            for step, value in _pairs(record.get("diffs")):
                if step < limit * self.steps_per_rollout and _finite(value):
                    if int(step) not in self._diffs:
                        self._diff_curve.add(int(step) // self.steps_per_rollout, significant(float(value)))
                        self._set_diff(int(step), float(value))
            later_offsets.append(int(record.get("offset") or 0))

    def ledger_fields(self) -> dict:
        """What later attempts need from this one (kept in its ledger record)."""
        first_step = self.offset * self.steps_per_rollout
        return {
            "finished": self.done(),
            "evals": [[r, scores] for r, scores in self._eval_history],
            "diffs": [[step, significant(v, 6)] for step, v in sorted(self._diffs.items()) if step >= first_step],
        }

    # ------------------------------------------------------------------ folding
    def apply(self, event: Event) -> bool:
        """Fold one event; True when the status changed."""
        kind = event.kind
        if kind in ("perf", "rollout", "eval") or (kind == "step" and self._training is None):
            self._first_id(event.id if kind != "step" else event.id // self.steps_per_rollout)
        if kind == "saving":
            self._logged_saves.setdefault(event.id, event.path)
            self._saves_epoch += 1
        elif kind == "checkpoint":
            self._megatron_saves[event.id] = event.path
            self._saves_epoch += 1
        elif kind == "resumed":
            self.notes.append(f"the trainer restored the adapter and optimizer of iteration {event.id}")
        elif kind == "not_resumed":
            self.notes.append(
                f"WARNING: the trainer could not load {event.path} and trains a fresh adapter: "
                f"the {self.offset} rollouts counted as done are not in this attempt's adapter"
            )
        elif kind == "wandb":
            # the CRD's bound (any other would refuse the whole patch); a URL with a control,
            # format or space character is not shown at all (text.printable would change it)
            url = event.path or ""
            if url.startswith("https://") and len(url) <= MAX_URL and printable(url) == url and " " not in url:
                self.wandb_url = url
        elif kind == "eval":
            if event.id > 0:  # eval N (N > 0) runs after rollout N and its save (train.py:121-137)
                self._log_done_local = max(self._log_done_local, event.id)
            self._fold_eval(event.id + self._id_offset, event.values)
        else:
            for field, source in METRIC_SOURCES:
                if source in event.values:
                    self._metrics[field] = event.values[source]
            self._watch_finite(event)
            reward = event.values.get("rollout/raw_reward")
            if kind in ("perf", "rollout") and _finite(reward):
                self._reward_curve.add(event.id + self._id_offset, significant(float(reward)))
            if kind in ("perf", "rollout"):
                self._log_done_local = max(self._log_done_local, event.id - 1)
            rollout = event.id + self._id_offset
            if kind == "rollout":
                self._training = rollout
                self._finish(rollout - 1)
            elif kind == "step":
                step = event.id + self._id_offset * self.steps_per_rollout
                self._step = step
                diff = event.values.get(DIFF_KEY)
                if _finite(diff):
                    self._set_diff(step, diff)
                    self._diff_curve.add(step // self.steps_per_rollout, significant(float(diff)))
                self._finish(self._training if self._training is not None else event.id // self.steps_per_rollout + self._id_offset)
            elif kind == "perf" and not any(k.startswith("rollout/") for k in event.values):
                self._finish(rollout)
        return self._refresh()

    def _watch_finite(self, event: Event) -> None:
        """Count the rollouts in a row a watched metric was NaN/inf (a finite value clears it)."""
        if event.kind == "step":
            rollout = self._training if self._training is not None else event.id // self.steps_per_rollout + self._id_offset
        else:
            rollout = event.id + self._id_offset
        for field, source in WATCHED_FINITE:
            value = event.values.get(source)
            if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                self._non_finite.pop(field, None)
                continue
            word = "NaN" if math.isnan(value) else ("Inf" if value > 0 else "-Inf")
            seen = self._non_finite.get(field)
            if seen is None:
                rollout = max(0, rollout)
                self._non_finite[field] = {K.NF_METRIC: field, K.NF_VALUE: word, K.NF_SINCE: rollout, K.NF_ROLLOUT: rollout, K.NF_STREAK: 1}
            elif rollout > seen[K.NF_ROLLOUT]:
                seen.update({K.NF_VALUE: word, K.NF_ROLLOUT: rollout, K.NF_STREAK: min(MAX_STREAK, seen[K.NF_STREAK] + 1)})
            else:  # the same rollout again (its perf line, another step): not one more in the row
                seen[K.NF_VALUE] = word

    def _first_id(self, local: int) -> None:
        if self._first_id_seen:
            return
        self._first_id_seen = True
        if self.offset == 0:
            return
        if local >= self.offset:
            self._id_offset = 0
            self.notes.append(
                f"attempt {self.attempt}: the trainer's first rollout id is {local}: it continued "
                f"after the {self.offset} rollouts done before; its ids are used as they are"
            )
        else:
            self.notes.append(
                f"attempt {self.attempt}: the trainer's first rollout id is {local}; it resumed "
                f"after {self.offset} rollouts, so its ids are shown as id + {self.offset}"
            )

    def apply_scan(self, saves: list | None, save_dir: str | None = None) -> bool:
        if saves is None:  # keep the last good scan over a transient error
            return False
        self._saves = saves
        self._save_dir = save_dir
        self._saves_epoch += 1
        return self._refresh()

    def _set_diff(self, step: int, value: float) -> None:
        old = self._diffs.get(step)
        if old is not None:
            self._diff_sum -= Fraction(old)
        self._diffs[step] = value
        self._diff_sum += Fraction(value)

    def _finish(self, rollout: int | None) -> None:
        if rollout is None or rollout < 0 or rollout <= self._finished:
            return
        self._finished = rollout
        now = self._clock()
        if self._first is None:
            self._first = (now, rollout)
        self._last = (now, rollout)

    def _fold_eval(self, rollout: int, values: dict, keep: bool = True) -> None:
        scores = {n: v for n, v in eval_scores(values).items() if _finite(v) and (self.eval_names is None or n in self.eval_names)}
        if keep and scores:
            self._eval_history.append((rollout, scores))
        for name, score in scores.items():
            if not _finite(score):
                continue
            self._eval_curves.setdefault(name, Curve()).add(rollout, significant(float(score)))
            entry = self._evals.get(name)
            if entry is None:
                self._evals[name] = {K.EVAL_NAME: name, K.EVAL_LATEST: score, K.EVAL_LATEST_ROLLOUT: rollout, K.EVAL_BEST: score, K.EVAL_BEST_ROLLOUT: rollout}
                continue
            if rollout >= entry[K.EVAL_LATEST_ROLLOUT]:
                entry[K.EVAL_LATEST], entry[K.EVAL_LATEST_ROLLOUT] = score, rollout
            if score > entry[K.EVAL_BEST] or (score == entry[K.EVAL_BEST] and rollout < entry[K.EVAL_BEST_ROLLOUT]):
                entry[K.EVAL_BEST], entry[K.EVAL_BEST_ROLLOUT] = score, rollout

    def _refresh(self) -> bool:
        core = self._compute()
        if core == self._core:
            return False
        self._core = core
        self.version += 1
        self._updated = self._clock()
        return True

    # ------------------------------------------------------------------ status
    def _all_saves(self) -> list:
        """Scanned saves, plus this attempt's saves the log announced that the scan has not seen."""
        saves = list(self._saves or [])
        seen = {(s.attempt, s.local) for s in saves}
        base = self._save_dir
        for local, path in sorted(self._logged_saves.items()):
            if (self.attempt, local) not in seen:
                saves.append(checkpoints.Save(self.attempt, local, local + self._id_offset, _adapter_path(path, base, local), False))
        for local, path in sorted(self._megatron_saves.items()):
            if (self.attempt, local) not in seen:
                saves.append(checkpoints.Save(self.attempt, local, local + self._id_offset, _adapter_path(path, base, local), True))
        return saves

    def _checkpoints(self) -> dict | None:
        """The checkpoint fields; judged again only when a save or the log's proof changed (not per line)."""
        key = (self._saves_epoch, self._log_done_local, self._id_offset)
        if key != self._verdict_key:
            self._verdict_key, self._verdict = key, self._judge()
        return dict(self._verdict) if self._verdict else None

    def _judge(self) -> dict | None:
        verdict = checkpoints.judge(self._all_saves(), self.attempt, self._log_done_local)
        out = {}
        if verdict.complete:
            latest = verdict.complete[-1]
            out = {K.LATEST_ITERATION: latest.rollout, K.LATEST_PATH: latest.adapter, K.COUNT: len({s.rollout for s in verdict.complete})}
        if verdict.saving is not None:
            out[K.SAVING] = verdict.saving.rollout
        return out or None

    @property
    def saw_rollouts(self) -> bool:
        """Whether the trainer printed any rollout, step or eval line in this attempt."""
        return self._first_id_seen

    def done(self) -> int:
        return self._core[K.PROGRESS][K.ROLLOUT]

    def _compute(self) -> dict:
        ckpt = self._checkpoints()
        done = max(self._finished + 1, self.offset)
        if ckpt and K.LATEST_ITERATION in ckpt:
            done = max(done, ckpt[K.LATEST_ITERATION] + 1)
        if self.total > 0:
            done = min(done, self.total)
        progress = {
            K.ROLLOUT: done,
            K.TOTAL: self.total,
            K.PERCENT: min(100, done * 100 // self.total) if self.total > 0 else 0,
            K.ATTEMPTS: self.attempt,
            K.TRAINED_ROLLOUTS: self._earlier_trained + max(0, done - self.offset),
        }
        eta = self._eta(done)
        if eta is not None:
            progress[K.ETA_SECONDS] = eta
        metrics: dict[str, Any] = {}
        if self._step is not None:
            metrics[K.STEP] = self._step
        for field, _ in METRIC_SOURCES:
            value = self._metrics.get(field)
            if _finite(value):
                metrics[field] = significant(float(value))
        if self._diffs:
            metrics[K.LOGPROB_DIFF_MEAN] = significant(float(self._diff_sum) / len(self._diffs))
        if self._non_finite:
            metrics[K.NON_FINITE] = [dict(self._non_finite[field]) for field, _ in WATCHED_FINITE if field in self._non_finite]
        status: dict[str, Any] = {K.PROGRESS: progress, K.METRICS: metrics}
        if self._evals:
            status[K.EVAL] = [
                {**e, K.EVAL_LATEST: significant(e[K.EVAL_LATEST]), K.EVAL_BEST: significant(e[K.EVAL_BEST])} for _, e in sorted(self._evals.items())
            ]
        if ckpt:
            status[K.CHECKPOINTS] = ckpt
        if self.wandb_url:
            status[K.TRACKING] = {K.WANDB_RUN_URL: self.wandb_url}
        history = self._history()
        if history:
            status[K.HISTORY] = history
        return status

    def _history(self) -> dict:
        out: dict = {}
        if self._reward_curve:
            out[K.HISTORY_REWARD] = self._reward_curve.points()
        if self._diff_curve:
            out[K.HISTORY_LOGPROB_DIFF] = self._diff_curve.points()
        evals = [{K.CURVE_NAME: n, K.CURVE_POINTS: c.points()} for n, c in sorted(self._eval_curves.items()) if c]
        if evals:
            out[K.HISTORY_EVAL] = evals
        return out

    def _eta(self, done: int) -> int | None:
        if self.total > 0 and done >= self.total:
            return 0
        if self._first is None or self._last is None or self._last[1] <= self._first[1]:
            return None
        per_rollout = (self._last[0] - self._first[0]) / (self._last[1] - self._first[1])
        return max(0, int(round(per_rollout * max(0, self.total - done))))

    def status(self) -> dict:
        """The owned status fields, without unknown or non-finite values."""
        status = copy.deepcopy(self._core)
        status[K.PROGRESS][K.LAST_UPDATE_TIME] = rfc3339(self._updated)
        return status


def _pairs(value) -> list:
    """[[number, value], ...] from a ledger record; anything malformed is skipped."""
    out = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and not isinstance(item[0], bool):
            out.append((item[0], item[1]))
    return out


def _adapter_path(logged: str | None, save_dir: str | None, local: int) -> str:
    """The adapter directory of a logged save: the logged path (already .../iter_N/adapter for
    LoRA saves; a Megatron save logs its save directory), else <save_dir>/iter_N/adapter."""
    if logged:
        stripped = logged.rstrip("/")
        if stripped.endswith("/" + checkpoints.ADAPTER):
            return stripped
        if stripped.rsplit("/", 1)[-1].startswith("iter_"):
            return f"{stripped}/{checkpoints.ADAPTER}"
        return f"{stripped}/{checkpoints.iter_name(local)}/{checkpoints.ADAPTER}"
    base = save_dir or "."
    return f"{base.rstrip('/')}/{checkpoints.iter_name(local)}/{checkpoints.ADAPTER}"
