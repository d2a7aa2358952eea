"""The payload log records reason codes only when told (GATEWAY_PAYLOAD_LOG_EXPLANATIONS), and
then only for the predictions that asked for them: null in the others."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from gateway.payload_log.layout import to_table
from gateway.responses import Explanation, Reason
from gateway.settings import GatewaySettings, nest
from tests.gateway.payload_log.helpers import VIEWS, observation

EXPLAINED = Explanation(
    explains=1,
    units="log_odds",
    base_value=-2.0,
    raw_score=-0.5,
    columns=5,
    reasons=(Reason("amount", 980.0, 1.25), Reason("merchant_category", None, 0.5)),
)


def test_the_setting_is_off_by_default_and_read_from_its_flat_name(monkeypatch):
    assert GatewaySettings().payload_log.explanations is False
    assert GatewaySettings(**nest({"payload_log_explanations": True})).payload_log.explanations is True
    monkeypatch.setenv("GATEWAY_PAYLOAD_LOG_EXPLANATIONS", "true")
    assert GatewaySettings().payload_log.explanations is True


def test_reason_codes_are_logged_when_asked_and_only_for_the_rows_that_asked():
    seen = observation(3)
    predictions = list(seen.predictions)
    predictions[1] = dataclasses.replace(predictions[1], explanation=EXPLAINED)
    seen = dataclasses.replace(seen, predictions=predictions)
    rows = np.arange(3)
    off = to_table(seen, rows, VIEWS, None)
    assert not [c for c in off.column_names if c.startswith("__explanation")]
    table = to_table(seen, rows, VIEWS, None, explanations=True)
    assert table.column("__explanation_reasons").to_pylist() == [
        None,
        [
            {"column": "amount", "value": "980.0", "contribution": 1.25},
            {"column": "merchant_category", "value": None, "contribution": 0.5},
        ],
        None,
    ]
    assert table.column("__explanation_raw_score").to_pylist() == [None, -0.5, None]
    assert table.column("__explanation_base_value").to_pylist() == [None, -2.0, None]
    assert table.column("__explanation_explains").to_pylist() == [None, "1", None]
    assert table.schema.field("__explanation_reasons").type == pa.list_(
        pa.struct([("column", pa.string()), ("value", pa.string()), ("contribution", pa.float64())])
    )
