"""What skl2onnx does not reproduce of a fitted scikit-learn model, and what the builder does
about it (builder/convert/sklearn.py uses both):

- ``convertible``: where a parameter that skl2onnx refuses or converts wrongly has an equivalent
  for what is served (``predict``/``predict_proba``), skl2onnx is given a copy of the model with
  the equivalent; parity still runs the model as logged.
- ``KNOWN_CAUSES``: where there is none, the refusal's hint says what to change in the model,
  matched on the fitted estimators' parameters (not on the converter's error text), at the stage
  where the gap shows: ``convert`` (skl2onnx refuses) or ``parity`` (the graph refuses the parity
  rows or answers differently).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np


def refuses_unseen(estimator: Any) -> bool:
    """An encoder that raises on a category it did not learn (OneHotEncoder's default,
    OrdinalEncoder's too)."""
    return getattr(estimator, "handle_unknown", None) == "error" and hasattr(estimator, "categories_")


def _infrequent(estimator: Any) -> dict[int, list[Any]]:
    """A OneHotEncoder's infrequent categories (``min_frequency``/``max_categories``), by the
    index of the column it learned them on; empty when it learned none."""
    if not getattr(estimator, "_infrequent_enabled", False):
        return {}
    found = getattr(estimator, "infrequent_categories_", None) or []
    return {i: list(cats) for i, cats in enumerate(found) if cats is not None}


def convertible(model: Any) -> Any:
    """The model as skl2onnx is given it: where a parameter that skl2onnx refuses or converts
    wrongly has an equivalent for what is served, a copy with the equivalent (the original,
    which parity runs, is not changed). ``_equivalent`` says which."""
    steps = getattr(model, "steps", None)
    if steps:
        rebuilt = [(name, convertible(step)) for name, step in steps]
        if any(new is not old for (_, new), (_, old) in zip(rebuilt, steps, strict=True)):
            model = _with(model, steps=rebuilt)
    fitted = getattr(model, "transformers_", None)
    if fitted:
        parts = [(name, t if isinstance(t, str) else convertible(t), cols) for name, t, cols in fitted]
        if any(new[1] is not old[1] for new, old in zip(parts, fitted, strict=True)):
            model = _with(model, transformers_=parts)
    return _equivalent(model)


def _equivalent(estimator: Any) -> Any:
    """- A soft VotingClassifier's ``flatten_transform`` shapes ``transform()`` only, never
    ``predict_proba`` (what is served); skl2onnx refuses True, the default: it gets False. Its
    ``weights`` given as a list (scikit-learn takes any array-like) become an array, which is
    what skl2onnx's converter reads them as.
    - A OneHotEncoder with ``handle_unknown="infrequent_if_exist"`` (or ``"warn"``) that learned
    no infrequent category encodes an unseen one as zeros, as ``"ignore"`` does; skl2onnx's
    graph for it refuses unseen categories, its graph for ``"ignore"`` reproduces it."""
    from sklearn.ensemble import VotingClassifier
    from sklearn.preprocessing import OneHotEncoder

    if isinstance(estimator, VotingClassifier):
        changes: dict[str, Any] = {}
        if estimator.voting == "soft" and estimator.flatten_transform:
            changes["flatten_transform"] = False
        if estimator.weights is not None and not isinstance(estimator.weights, np.ndarray):
            changes["weights"] = np.asarray(estimator.weights, dtype=np.float64)
        return _with(estimator, **changes) if changes else estimator
    if (
        isinstance(estimator, OneHotEncoder)
        and estimator.handle_unknown in ("infrequent_if_exist", "warn")
        and not _infrequent(estimator)
    ):
        return _with(estimator, handle_unknown="ignore")
    return estimator


def _with(estimator: Any, **attributes: Any) -> Any:
    """A shallow copy of a fitted estimator with ``attributes`` set (its fitted parts shared)."""
    twin = copy.copy(estimator)
    for name, value in attributes.items():
        setattr(twin, name, value)
    return twin


@dataclass(frozen=True)
class KnownCause:
    """A parameter of a fitted estimator that skl2onnx does not reproduce: where it shows
    (``stages``, as in ``FlavorConverter.known_cause``), and the hint saying what to change,
    from the estimator and the input columns it reads (None: columns made by earlier steps)."""

    estimator: str  # the class name (or a base class's)
    stages: frozenset[str]
    applies: Callable[[Any], bool]
    hint: Callable[[Any, list[str] | None], str]

    def matches(self, estimator: Any, stage: str) -> bool:
        names = {cls.__name__ for cls in type(estimator).__mro__}
        return stage in self.stages and self.estimator in names and bool(self.applies(estimator))


CONVERT, PARITY = frozenset({"convert"}), frozenset({"parity"})


def _over(cols: list[str] | None) -> str:
    return f" over {', '.join(map(repr, cols))}" if cols else ""


def _infrequent_named(estimator: Any, cols: list[str] | None) -> str:
    shown = []
    for index, cats in _infrequent(estimator).items():
        column = cols[index] if cols and index < len(cols) else f"column {index}"
        more = ", ..." if len(cats) > 4 else ""
        shown.append(f"{column}: {', '.join(repr(str(c)) for c in cats[:4])}{more}")
    return "; ".join(shown)


def _sublinear_tf(estimator: Any, cols: list[str] | None) -> str:
    return (
        f"{type(estimator).__name__}(sublinear_tf=True): skl2onnx scales a term count tf by "
        "log(1 + tf) where scikit-learn takes 1 + log(tf); train with sublinear_tf=False"
    )


def _indicator_columns(estimator: Any) -> int:
    indicator = getattr(estimator, "indicator_", None)
    return len(getattr(indicator, "features_", ()))


KNOWN_CAUSES = (
    KnownCause(
        "SimpleImputer",
        PARITY,
        lambda e: bool(e.add_indicator) and _indicator_columns(e) > 0,
        lambda e, cols: (
            f"SimpleImputer(add_indicator=True){_over(cols)}: skl2onnx leaves out its "
            f"{_indicator_columns(e)} missing-indicator column(s), so the steps after it read the wrong "
            "features; train with add_indicator=False (add 0/1 missing-value columns to the data before "
            "the model if it needs them)"
        ),
    ),
    # TfidfVectorizer is no TfidfTransformer (it is a CountVectorizer): one entry each.
    KnownCause("TfidfTransformer", PARITY, lambda e: bool(e.sublinear_tf), _sublinear_tf),
    KnownCause("TfidfVectorizer", PARITY, lambda e: bool(e.sublinear_tf), _sublinear_tf),
    KnownCause(
        "VotingClassifier",  # a soft one is converted with flatten_transform=False (_equivalent)
        CONVERT,
        lambda e: e.voting == "hard" and bool(e.flatten_transform),
        lambda e, cols: (
            "VotingClassifier(voting='hard', flatten_transform=True): skl2onnx refuses "
            "flatten_transform=True, which a hard VotingClassifier never uses (it shapes a soft "
            "one's transform() only): train it with flatten_transform=False"
        ),
    ),
    KnownCause(
        "CalibratedClassifierCV",
        PARITY,
        lambda e: e.method == "isotonic",
        lambda e, cols: (
            "CalibratedClassifierCV(method='isotonic'): skl2onnx takes the nearest calibration "
            "point where scikit-learn interpolates between them; calibrate with method='sigmoid'"
        ),
    ),
    KnownCause(
        "OneHotEncoder",
        CONVERT,
        lambda e: bool(_infrequent(e)),
        lambda e, cols: (
            f"OneHotEncoder{_over(cols)} grouped categories into an infrequent one "
            f"(min_frequency={e.min_frequency!r}, max_categories={e.max_categories!r}; "
            f"{_infrequent_named(e, cols)}), which skl2onnx cannot encode for a single input: train "
            "without min_frequency and max_categories (map rare categories to one value, e.g. "
            "'other', before the model)"
        ),
    ),
    KnownCause(
        "OneHotEncoder",
        PARITY,
        lambda e: bool(_infrequent(e)) and e.handle_unknown in ("infrequent_if_exist", "warn"),
        lambda e, cols: (
            f"OneHotEncoder(handle_unknown={e.handle_unknown!r}){_over(cols)} counts a category "
            "never seen in training as infrequent (min_frequency/max_categories), which skl2onnx's "
            "graph refuses: set handle_unknown='ignore' (unseen categories then encode as zeros), "
            "or train without min_frequency and max_categories"
        ),
    ),
)


def known_cause(estimators: Iterable[tuple[Any, list[str] | None]], stage: str) -> str | None:
    """The hints of every KNOWN_CAUSES entry that the fitted ``estimators`` (each with the input
    columns it reads, None where earlier steps made them) show at ``stage``, joined."""
    hints = [
        cause.hint(est, cols)
        for est, cols in estimators
        for cause in KNOWN_CAUSES
        if cause.matches(est, stage)
    ]
    return "; ".join(dict.fromkeys(hints)) or None
