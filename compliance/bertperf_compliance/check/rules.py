"""The BERT compliance rules of the MLPerf Training rulesets 1.1.0 to 5.0.0, as data.

Each ruleset is a set of *rule files* with the same roles as the official
checker's: ``common`` (always first), ``closed_common``/``open_common`` (queued
by ``submission_division``) and ``closed_bert``/``open_bert`` (queued by
``submission_benchmark``).  A rule file holds key rules (an occurrence
requirement plus per-line checks, a state update, and an "at least one line
must satisfy" test) and end-of-log checks.  :mod:`.engine` runs them with the
official evaluation order and bookkeeping.

Predicates take ``(v, md, ll, s)``: the record's value, its metadata exactly as
logged (not necessarily a dict), the :class:`~bertperf_compliance.mllog_parse.Record`
and the rule file's state dict.  They are ordinary Python so that odd inputs
(a string where a number belongs, metadata that is a list) behave exactly as
they do under the official checker: a ``TypeError`` is a failed check, not a
pass.  The rules differ between versions only where the official ones do; the
``RULESET_FEATURES`` table says where.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

Predicate = Callable[[Any, Any, Any, dict], Any]
# A state update; may return config names to enqueue.
Action = Callable[[Any, Any, Any, dict], Optional[List[str]]]

EXACTLY_ONE = "EXACTLY_ONE"
AT_LEAST_ONE = "AT_LEAST_ONE"
AT_LEAST_ONE_OR = "AT_LEAST_ONE_OR"


@dataclass(frozen=True)
class Check:
    """One condition every occurrence of a key must meet."""

    rule_id: str
    text: str
    test: Predicate
    fix: str


@dataclass(frozen=True)
class KeyRule:
    key: str
    req: Optional[str] = None
    alternatives: Tuple[str, ...] = ()
    checks: Tuple[Check, ...] = ()
    post: Optional[Action] = None
    at_least_one: Optional[Check] = None
    req_fix: str = ""


@dataclass(frozen=True)
class EndCheck:
    rule_id: str
    text: str
    test: Callable[[dict], Any]
    fix: str
    explain: Optional[Callable[[dict], str]] = None


@dataclass(frozen=True)
class RuleFile:
    name: str
    keys: Tuple[KeyRule, ...]
    begin: Optional[Callable[[dict], None]] = None
    end: Tuple[EndCheck, ...] = ()

    def key_map(self) -> Dict[str, KeyRule]:
        # Later records for the same key replace earlier ones, as in the official loader.
        return {rule.key: rule for rule in self.keys}


# --------------------------------------------------------------------------------------
# Per-ruleset differences.

_BENCHMARKS_21 = ("resnet", "ssd", "maskrcnn", "minigo", "dlrm", "bert", "rnnt", "unet3d")
_BENCHMARKS_30 = ("resnet", "ssd", "maskrcnn", "gpt3", "dlrm_dcnv2", "bert", "rnnt", "unet3d")
_BENCHMARKS_31 = ("resnet", "ssd", "stable_diffusion", "maskrcnn", "gpt3", "dlrm_dcnv2", "bert",
                  "rnnt", "unet3d")
_BENCHMARKS_40_OPEN = _BENCHMARKS_31 + ("gnn",)
_BENCHMARKS_40_CLOSED = _BENCHMARKS_40_OPEN + ("llama2_70b_lora",)
_BENCHMARKS_50 = ("retinanet", "stable_diffusion", "dlrm_dcnv2", "bert", "rgat", "llama2_70b_lora",
                  "llama31_405b")

RULESET_FEATURES: Dict[str, Dict[str, Any]] = {
    # org_platform: submission_org/_platform must be non-empty, exactly once.
    # status: submission_status must be one of the four old words.
    # counter: the metadata key accepted instead of epoch counts on block and eval lines.
    # epoch_counter: whether epoch_start/epoch_stop also accept that counter.
    # weights: the 398-tensor weights_initialization check (closed only).
    # epsilon: the LAMB epsilon key closed BERT requires (opt_epsilon up to 2.0.0).
    # division_budget: the init budget follows submission_division (30/240 min); else always 30.
    "1.1.0": dict(org_platform=True, status=True, counter=None, epoch_counter=False, weights=True,
                  closed=_BENCHMARKS_21, open=_BENCHMARKS_21, epsilon="opt_epsilon", division_budget=False),
    "2.0.0": dict(org_platform=True, status=True, counter=None, epoch_counter=False, weights=True,
                  closed=_BENCHMARKS_21, open=_BENCHMARKS_21, epsilon="opt_epsilon"),
    "2.1.0": dict(org_platform=True, status=True, counter=None, epoch_counter=False, weights=True,
                  closed=_BENCHMARKS_21, open=_BENCHMARKS_21),
    "3.0.0": dict(org_platform=True, status=True, counter=None, epoch_counter=False, weights=False,
                  closed=_BENCHMARKS_30, open=_BENCHMARKS_30),
    "3.1.0": dict(org_platform=True, status=True, counter="step_num", epoch_counter=False,
                  weights=False, closed=_BENCHMARKS_31, open=_BENCHMARKS_31),
    "4.0.0": dict(org_platform=True, status=True, counter="samples_count", epoch_counter=False,
                  weights=False, closed=_BENCHMARKS_40_CLOSED, open=_BENCHMARKS_40_OPEN),
    "4.1.0": dict(org_platform=True, status=False, counter="samples_count", epoch_counter=False,
                  weights=False, closed=_BENCHMARKS_40_CLOSED, open=_BENCHMARKS_40_OPEN),
    "5.0.0": dict(org_platform=False, status=False, counter="samples_count", epoch_counter=True,
                  weights=False, closed=_BENCHMARKS_50, open=_BENCHMARKS_50),
}

for _features in RULESET_FEATURES.values():
    _features.setdefault("epsilon", "opt_lamb_epsilon")
    _features.setdefault("division_budget", True)

RULESETS = tuple(RULESET_FEATURES)

CLOSED_TARGET = 0.720
INIT_BUDGET_MINUTES = {"closed": 30, "open": 240}
STATUS_WORDS = ("cloud", "onprem", "preview", "research")
DIVISIONS = ("closed", "open")

BERT_HYPERPARAMETERS = (
    "global_batch_size", "opt_base_learning_rate", "opt_lamb_epsilon",
    "opt_learning_rate_training_steps", "opt_learning_rate_warmup_steps", "num_warmup_steps",
    "start_warmup_step", "opt_lamb_beta_1", "opt_lamb_beta_2", "opt_lamb_weight_decay_rate",
)


def _bert_tensor_names() -> Tuple[str, ...]:
    names = [
        "bert/embeddings/word_embeddings",
        "bert/embeddings/position_embeddings",
        "bert/embeddings/token_type_embeddings",
        "bert/embeddings/LayerNorm/gamma",
        "bert/embeddings/LayerNorm/beta",
    ]
    per_layer = (
        "attention/self/query/kernel", "attention/self/query/bias",
        "attention/self/key/kernel", "attention/self/key/bias",
        "attention/self/value/kernel", "attention/self/value/bias",
        "attention/output/dense/kernel", "attention/output/dense/bias",
        "attention/output/LayerNorm/gamma", "attention/output/LayerNorm/beta",
        "intermediate/dense/kernel", "intermediate/dense/bias",
        "output/dense/kernel", "output/dense/bias",
        "output/LayerNorm/gamma", "output/LayerNorm/beta",
    )
    for layer in range(24):
        names.extend(f"bert/encoder/layer_{layer}/{suffix}" for suffix in per_layer)
    names += [
        "bert/pooler/dense/kernel",
        "bert/pooler/dense/bias",
        "cls/predictions/output_bias",
        "cls/predictions/transform/dense/kernel",
        "cls/predictions/transform/dense/bias",
        "cls/predictions/transform/LayerNorm/gamma",
        "cls/predictions/transform/LayerNorm/beta",
        "cls/seq_relationship/output_weights",
        "cls/seq_relationship/output_bias",
    ]
    return tuple(names)


BERT_TENSOR_NAMES = _bert_tensor_names()
_SORTED_TENSOR_NAMES = sorted(BERT_TENSOR_NAMES)


# --------------------------------------------------------------------------------------
# Builders.

def _common(version: str) -> RuleFile:
    f = RULESET_FEATURES[version]
    counter = f["counter"]
    keys: List[KeyRule] = []

    if f["org_platform"]:
        for key in ("submission_org", "submission_platform"):
            keys.append(KeyRule(
                key, EXACTLY_ONE,
                checks=(Check("non-empty", "the value must not be the empty string",
                              lambda v, md, ll, s: v != "",
                              f"log {key} once with a non-empty string"),),
                req_fix=f"log {key} exactly once, before init_stop"))

    def division_post(v, md, ll, s):
        if f["division_budget"]:
            s["compile_time_mins"] = 240 if v == "open" else 30
        return ["{}_common".format(v)]

    keys.append(KeyRule(
        "submission_division", EXACTLY_ONE,
        checks=(Check("division-word", "the value must be 'closed' or 'open'",
                      lambda v, md, ll, s: v in ["closed", "open"],
                      "log submission_division with the value \"closed\" or \"open\""),),
        post=division_post,
        req_fix="log submission_division exactly once, before init_stop (it sets the init budget)"))

    if f["status"]:
        keys.append(KeyRule(
            "submission_status", EXACTLY_ONE,
            checks=(Check("status-word", "the value must be one of cloud, onprem, preview, research",
                          lambda v, md, ll, s: v in ["cloud", "onprem", "preview", "research"],
                          "log submission_status as \"onprem\", \"cloud\", \"preview\" or \"research\""),),
            req_fix="log submission_status exactly once"))

    keys.append(KeyRule(
        "cache_clear", AT_LEAST_ONE,
        checks=(Check("has-value", "the event must carry a value",
                      lambda v, md, ll, s: True, "log cache_clear with the value true"),),
        req_fix="clear caches before the run and log cache_clear (value true) at the start"))

    def init_start_post(v, md, ll, s):
        s["init_started"] = True
        s["first_init_start"] = min(s["first_init_start"], ll.time_ms)

    keys.append(KeyRule(
        "init_start", AT_LEAST_ONE,
        checks=(
            Check("init-start-before-init-stop", "init_start must come before init_stop",
                  lambda v, md, ll, s: not s["init_stopped"],
                  "log every init_start before init_stop"),
            Check("init-start-before-run-start", "init_start must come before run_start",
                  lambda v, md, ll, s: not s["run_started"],
                  "log every init_start before run_start"),
        ),
        post=init_start_post,
        req_fix="log init_start when initialisation begins"))

    keys.append(KeyRule(
        "init_stop", EXACTLY_ONE,
        checks=(
            Check("init-stop-after-init-start", "init_stop must follow an init_start",
                  lambda v, md, ll, s: s["init_started"],
                  "log init_start before init_stop"),
            Check("init-stop-before-run-start", "init_stop must come before run_start",
                  lambda v, md, ll, s: not s["run_started"],
                  "log init_stop before run_start"),
            Check("init-budget",
                  ("init_stop must come less than the init budget (30 min closed, 240 min open, "
                   "set by submission_division) after the first init_start" if f["division_budget"] else
                   "init_stop must come less than 30 min after the first init_start"),
                  lambda v, md, ll, s: ll.time_ms - s["first_init_start"]
                  < (s["compile_time_mins"] * 60 * 1e3),
                  ("log submission_division before init_stop, and keep untimed initialisation "
                   "under the budget" if f["division_budget"] else "keep untimed initialisation under 30 min")),
        ),
        post=lambda v, md, ll, s: s.__setitem__("init_stopped", True),
        req_fix="log init_stop exactly once, between init_start and run_start"))

    keys.append(KeyRule(
        "run_start", EXACTLY_ONE,
        checks=(Check("run-start-after-init-stop", "run_start must follow init_stop",
                      lambda v, md, ll, s: s["init_stopped"] == True,  # noqa: E712 (as official)
                      "log init_stop before run_start"),),
        post=lambda v, md, ll, s: s.__setitem__("run_started", True),
        req_fix="log run_start exactly once, after init_stop"))

    keys.append(KeyRule(
        "run_stop", EXACTLY_ONE,
        checks=(
            Check("run-stop-after-run-start", "run_stop must follow run_start",
                  lambda v, md, ll, s: s["run_started"],
                  "log run_start before run_stop"),
            Check("run-stop-status", "run_stop metadata must have 'status'",
                  lambda v, md, ll, s: "status" in md,
                  "add metadata {\"status\": \"success\"} (or \"aborted\") to run_stop"),
        ),
        post=lambda v, md, ll, s: s.__setitem__("run_stopped", True),
        req_fix="log run_stop exactly once, at the end of the timed run"))

    if counter is None:
        block_start_checks = (
            Check("block-start-after-run-start", "block_start must follow run_start",
                  lambda v, md, ll, s: s["run_started"], "log run_start before block_start"),
            Check("block-start-epoch-count", "block_start metadata must have 'epoch_count'",
                  lambda v, md, ll, s: "epoch_count" in md,
                  "add epoch_count (> 0) to block_start metadata"),
            Check("block-start-first-epoch", "block_start metadata must have 'first_epoch_num'",
                  lambda v, md, ll, s: "first_epoch_num" in md,
                  "add first_epoch_num to block_start metadata"),
            Check("block-start-count-positive", "block_start epoch_count must be a number > 0",
                  lambda v, md, ll, s: md["epoch_count"] > 0,
                  "give block_start a numeric epoch_count greater than 0"),
        )
    else:
        block_start_checks = (
            Check("block-start-after-run-start", "block_start must follow run_start",
                  lambda v, md, ll, s: s["run_started"], "log run_start before block_start"),
            Check("block-start-count", f"block_start metadata must have 'epoch_count' or '{counter}'",
                  lambda v, md, ll, s: ("epoch_count" in md) | (counter in md),
                  f"add epoch_count (> 0) or {counter} (>= 0) to block_start metadata"),
            Check("block-start-first-epoch",
                  "block_start metadata with 'epoch_count' must also have 'first_epoch_num'",
                  lambda v, md, ll, s: "first_epoch_num" in md if "epoch_count" in md else True,
                  "add first_epoch_num to block_start metadata"),
            Check("block-start-count-positive", "block_start epoch_count must be a number > 0",
                  lambda v, md, ll, s: md["epoch_count"] > 0 if "epoch_count" in md else True,
                  "give block_start a numeric epoch_count greater than 0"),
            Check("block-start-counter-nonnegative", f"block_start {counter} must be a number >= 0",
                  lambda v, md, ll, s: md[counter] >= 0 if counter in md else True,
                  f"give block_start a numeric {counter} of at least 0"),
        )
    keys.append(KeyRule("block_start", AT_LEAST_ONE_OR, ("epoch_start",), block_start_checks,
                        req_fix="log block_start/block_stop (or epoch_start/epoch_stop) around training"))

    def has_meta(name: str, alt: Optional[str], key: str, rule_id: str) -> Check:
        if alt is None:
            return Check(rule_id, f"{key} metadata must have '{name}'",
                         lambda v, md, ll, s: name in md,
                         f"add {name} to the metadata of every {key}")
        return Check(rule_id, f"{key} metadata must have '{name}' or '{alt}'",
                     lambda v, md, ll, s: (name in md) | (alt in md),
                     f"add {name} (or {alt}) to the metadata of every {key}")

    keys.append(KeyRule("block_stop", AT_LEAST_ONE_OR, ("epoch_stop",),
                        (has_meta("first_epoch_num", counter, "block_stop", "block-stop-first-epoch"),),
                        req_fix="log block_stop (or epoch_stop) at the end of training"))
    epoch_alt = counter if f["epoch_counter"] else None
    keys.append(KeyRule("epoch_start", AT_LEAST_ONE_OR, ("block_start",),
                        (has_meta("epoch_num", epoch_alt, "epoch_start", "epoch-start-epoch-num"),),
                        req_fix="log epoch_start (or block_start) at the start of training"))
    keys.append(KeyRule("epoch_stop", AT_LEAST_ONE_OR, ("block_stop",),
                        (has_meta("epoch_num", epoch_alt, "epoch_stop", "epoch-stop-epoch-num"),),
                        req_fix="log epoch_stop (or block_stop) at the end of training"))
    keys.append(KeyRule("eval_start", AT_LEAST_ONE_OR, ("block_start",),
                        (has_meta("epoch_num", counter, "eval_start", "eval-start-epoch-num"),),
                        req_fix="log eval_start (or block_start)"))
    keys.append(KeyRule("eval_stop", AT_LEAST_ONE_OR, ("block_stop",),
                        (has_meta("epoch_num", counter, "eval_stop", "eval-stop-epoch-num"),),
                        req_fix="log eval_stop (or block_stop)"))
    keys.append(KeyRule("eval_accuracy", AT_LEAST_ONE,
                        checks=(has_meta("epoch_num", counter, "eval_accuracy", "eval-accuracy-epoch-num"),),
                        req_fix="log eval_accuracy after every evaluation"))
    for key in ("train_samples", "eval_samples"):
        keys.append(KeyRule(
            key, EXACTLY_ONE,
            checks=(Check("non-empty", "the value must not be the empty string",
                          lambda v, md, ll, s: v != "",
                          f"log {key} with the number of samples"),),
            req_fix=f"log {key} exactly once, before run_stop"))

    def begin(s):
        s.update({
            "init_started": False, "init_stopped": False, "run_started": False,
            "run_stopped": False, "in_epoch": False, "last_epoch": 0, "in_block": False,
            "block_first_epoch": -1, "first_init_start": 9e99,
            "compile_time_mins": 0 if f["division_budget"] else 30,
        })

    return RuleFile("common", tuple(keys), begin=begin)


def _division_common(version: str, division: str) -> RuleFile:
    allowed = list(RULESET_FEATURES[version][division])

    def post(v, md, ll, s):
        return ["{}_{}".format(division, v)]

    keys = [KeyRule(
        "submission_benchmark", EXACTLY_ONE,
        checks=(Check("benchmark-allowed",
                      f"the benchmark must be one of {', '.join(allowed)} in {division} {version}",
                      lambda v, md, ll, s: v in allowed,
                      "log submission_benchmark with the value \"bert\""),),
        post=post,
        req_fix="log submission_benchmark (\"bert\") exactly once")]
    if division == "closed":
        keys.append(KeyRule(
            "gradient_accumulation_steps", EXACTLY_ONE,
            checks=(Check("accumulation-positive", "the value must be a number > 0",
                          lambda v, md, ll, s: v > 0,
                          "log gradient_accumulation_steps as an integer >= 1"),),
            req_fix="log gradient_accumulation_steps exactly once (closed division)"))
    return RuleFile(f"{division}_common", tuple(keys))


def _tensor_mismatch(s: dict) -> str:
    from collections import Counter
    got = Counter(t for t in s["initialized_tensors"] if isinstance(t, str))
    want = Counter(BERT_TENSOR_NAMES)
    missing = sorted((want - got).elements())
    extra = sorted((got - want).elements())
    odd = [t for t in s["initialized_tensors"] if not isinstance(t, str)]
    parts = [f"{len(s['initialized_tensors'])} tensors logged, {len(BERT_TENSOR_NAMES)} expected"]
    if missing:
        parts.append(f"missing {len(missing)}: " + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    if extra:
        parts.append(f"extra or repeated {len(extra)}: " + ", ".join(extra[:5]) + (" ..." if len(extra) > 5 else ""))
    if odd:
        parts.append(f"{len(odd)} non-string tensor names")
    return "; ".join(parts)


def _closed_bert(version: str) -> RuleFile:
    f = RULESET_FEATURES[version]
    keys: List[KeyRule] = []
    end: Tuple[EndCheck, ...] = ()
    begin = None
    if f["weights"]:
        def begin(s):
            s.update({"initialized_tensors": []})

        def weights_post(v, md, ll, s):
            s["initialized_tensors"] += [md["tensor"]]

        keys.append(KeyRule(
            "weights_initialization", AT_LEAST_ONE,
            checks=(Check("weights-tensor", "weights_initialization metadata must have 'tensor'",
                          lambda v, md, ll, s: "tensor" in md,
                          "add metadata {\"tensor\": <TF variable name>} to every weights_initialization"),),
            post=weights_post,
            req_fix="log weights_initialization once per BERT tensor (398 lines)"))
        end = (EndCheck(
            "weights-tensor-set",
            "the weights_initialization tensors must be exactly the 398 BERT-Large variables, each once",
            lambda s: sorted(s["initialized_tensors"]) == _SORTED_TENSOR_NAMES,
            "log each of the 398 TF variable names once (no duplicates, none missing, no others)",
            explain=_tensor_mismatch),)

    for key in BERT_HYPERPARAMETERS:
        if key == "opt_lamb_epsilon":
            key = f["epsilon"]
        keys.append(KeyRule(key, EXACTLY_ONE, req_fix=f"log {key} exactly once"
                            + (" (opt_epsilon alone is not enough)" if key == "opt_lamb_epsilon" else "")))
    keys.append(KeyRule(
        "eval_accuracy", AT_LEAST_ONE,
        checks=(Check("eval-accuracy-epoch-num", "eval_accuracy metadata must have 'epoch_num'",
                      lambda v, md, ll, s: "epoch_num" in md,
                      "add epoch_num (training samples so far) to every eval_accuracy"),),
        at_least_one=Check("target-reached", "at least one eval_accuracy must be in [0.720, 1.0)",
                           lambda v, md, ll, s: (v >= CLOSED_TARGET) and v < 1.0,
                           "train until masked-LM accuracy reaches 0.720 and log that evaluation"),
        req_fix="log eval_accuracy after every evaluation"))
    return RuleFile("closed_bert", tuple(keys), begin=begin, end=end)


def _open_bert(version: str) -> RuleFile:
    return RuleFile("open_bert", (KeyRule(
        "eval_accuracy", AT_LEAST_ONE,
        checks=(Check("eval-accuracy-epoch-num", "eval_accuracy metadata must have 'epoch_num'",
                      lambda v, md, ll, s: "epoch_num" in md,
                      "add epoch_num (training samples so far) to every eval_accuracy"),),
        at_least_one=Check("accuracy-below-one", "at least one eval_accuracy must be below 1.0",
                           lambda v, md, ll, s: v < 1.0,
                           "log the accuracy as a fraction below 1.0"),
        req_fix="log eval_accuracy after every evaluation"),))


def build_ruleset(version: str) -> Dict[str, RuleFile]:
    """All rule files of one ruleset, by name (``common``, ``closed_bert``, ...)."""
    if version not in RULESET_FEATURES:
        raise KeyError(version)
    files = [_common(version), _division_common(version, "closed"),
             _division_common(version, "open"), _closed_bert(version), _open_bert(version)]
    return {rf.name: rf for rf in files}


def other_benchmarks(version: str) -> Tuple[str, ...]:
    """Benchmarks the official ruleset knows but this package has no rules for."""
    f = RULESET_FEATURES[version]
    return tuple(sorted((set(f["closed"]) | set(f["open"])) - {"bert"}))
