"""The payload log in an object store: a real gateway writes it to ``s3://BUCKET/payload-log``
with the endpoint and the credentials in its environment, the way an operator (and the Helm
chart, from a Secret) sets them, and ``gateway quality report --log s3://...``, a new process
run later, joins labels that arrive then with the predictions it finds there.

moto's server stands in for S3 (support/servers.py ``s3_server``): the same S3 REST API that
pyarrow's S3 client speaks, on loopback, run here because no cloud is reachable. It proves the
URL, the endpoint and credential variables, the writes (one object per flush, and what was
queued at shutdown) and the reads back. It does not prove IAM (moto accepts any key, so a wrong
or missing key cannot be shown here), a real store's consistency or its latency and throttling.

pyarrow's ``FileSystem.from_uri``, the gateway's and the report's way in, takes the endpoint
from ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (``http://host:port``; a URL's
``?endpoint_override=host:port&scheme=http`` wins over both) and, with one set, looks up no
bucket region: ``AWS_REGION`` names it. pyarrow's ``S3FileSystem(...)`` constructor reads
neither variable.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import requests

from support import servers
from tests.gateway.helpers import MODEL, Stack, gateway_env

pytestmark = pytest.mark.integration

BUCKET = "ml-payload-logs"
LOG = f"s3://{BUCKET}/payload-log"
PAIRS = [(17, 3), (250, 88), (401, 12)]  # user, merchant: entities of feature_repo's demo data


def aws_env(endpoint: str) -> dict[str, str]:
    """What an operator sets for a non-AWS S3 endpoint (MinIO, Ceph, a VPC endpoint)."""
    return {
        "AWS_ACCESS_KEY_ID": "payload-log-writer",
        "AWS_SECRET_ACCESS_KEY": "not-a-real-secret",
        "AWS_REGION": "eu-central-1",
        "AWS_ENDPOINT_URL": endpoint,
        # never ask the cloud's instance-metadata address for credentials: there is none here
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@dataclass
class Served:
    s3: servers.S3Server
    env: dict[str, str]  # the AWS variables
    answers: list[dict[str, Any]]  # one per prediction: its id, score and label
    version: str
    gateway_log: str
    gateway_exit: int | None

    @property
    def ids(self) -> list[str]:
        return [a["id"] for a in self.answers]

    def objects(self) -> list[str]:
        client = s3_client(self)
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix="payload-log/")
        return [o["Key"] for o in listed.get("Contents", [])]


def s3_client(served: Served) -> Any:
    """boto3, a second S3 client beside the gateway's pyarrow, to look at what the bucket holds."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=served.s3.endpoint,
        region_name=served.env["AWS_REGION"],
        aws_access_key_id=served.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=served.env["AWS_SECRET_ACCESS_KEY"],
    )


def bodies(count: int) -> list[list[dict[str, Any]]]:
    """``count`` requests of 1-3 rows, each row with its own amount."""
    out, n = [], 0
    for i in range(count):
        rows = []
        for j in range(1 + i % 3):
            user, merchant = PAIRS[(i + j) % 3]
            rows.append(
                {
                    "user_id": user,
                    "merchant_id": merchant,
                    "amount": 5.0 + n * 37.5,
                    "hour": (n * 7) % 24,
                    "channel": ("web", "app", "pos")[n % 3],
                }
            )
            n += 1
        out.append(rows)
    return out


@pytest.fixture(scope="module")
def served(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A bucket on moto, and a gateway (two workers) that logged every row it served there and
    was then stopped."""
    root = tmp_path_factory.mktemp("payload-s3")
    with servers.s3_server(root) as s3:
        env = aws_env(s3.endpoint)
        served = Served(s3, env, [], "", "", None)
        s3_client(served).create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": env["AWS_REGION"]}
        )
        # two worker processes: each writes its own objects under the one prefix
        log_env = {"GATEWAY_PAYLOAD_LOG": LOG, "GATEWAY_PAYLOAD_LOG_FLUSH_S": "0.5", "GATEWAY_WORKERS": "2"}
        gw_env = gateway_env(stack, **log_env, **env)
        with servers.gateway_process(root, gw_env) as gw:

            def predict(rows: list[dict[str, Any]]) -> dict[str, Any]:
                answer = requests.post(f"{gw.url}/v1/models/{MODEL}/predict", json={"rows": rows}, timeout=10)
                assert answer.status_code == 200, answer.text
                return answer.json()

            with ThreadPoolExecutor(4) as pool:
                bodies_ = list(pool.map(predict, bodies(12)))
        # the context sent SIGINT and waited: the log's close wrote what was still queued
        served.gateway_exit, served.gateway_log = gw.proc.returncode, gw.log_text()
        served.answers = [p for body in bodies_ for p in body["predictions"]]
        served.version = bodies_[0]["version"]
        yield served


def test_the_gateway_writes_its_payload_log_to_the_bucket(served: Served) -> None:
    # stopped by SIGINT (Ctrl-C) as an operator stops it: 130, that signal's exit status
    assert served.gateway_exit in (0, 130), served.gateway_log[-3000:]
    assert "Traceback" not in served.gateway_log
    assert "payload log: cannot write" not in served.gateway_log
    assert "were dropped" not in served.gateway_log
    files = [k for k in served.objects() if k.endswith(".parquet")]
    assert files, served.objects()
    for key in files:  # Feast's logging layout: one folder per model, date partitions in it
        assert key.startswith(f"payload-log/{MODEL}/log_date=20"), key
        assert "/." not in key  # no staging names left behind
    client = s3_client(served)
    tables = [
        pq.read_table(io.BytesIO(client.get_object(Bucket=BUCKET, Key=k)["Body"].read())) for k in files
    ]
    logged = [pid for t in tables for pid in t.column("__prediction_id").to_pylist()]
    assert sorted(logged) == sorted(served.ids)  # every served row once, none lost at shutdown
    rows = [r for t in tables for r in t.select(["__prediction_id", "__score"]).to_pylist()]
    scores = {r["__prediction_id"]: r["__score"] for r in rows}
    want = [a["score"] for a in served.answers]
    assert [scores[a["id"]] for a in served.answers] == pytest.approx(want, abs=1e-6)  # as answered


def hand_auc(truth: list[bool], score: list[float]) -> float:
    pos = [s for y, s in zip(truth, score, strict=True) if y]
    neg = [s for y, s in zip(truth, score, strict=True) if not y]
    return sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg) / (len(pos) * len(neg))


def report(
    stack: Stack, labels: Path, env: dict[str, str], log: str = LOG
) -> subprocess.CompletedProcess[str]:
    """``gateway quality report`` in its own process, with only ``env``'s AWS variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GATEWAY_"))}
    argv = [sys.executable, "-m", "gateway", "quality", "report", "--log", log, "--model", MODEL,
            "--repo", str(stack.model_repo), "--labels", str(labels), "--json"]  # fmt: skip
    return subprocess.run(argv, env={**clean, **env}, capture_output=True, text=True, timeout=120)


def test_labels_that_arrive_later_join_the_log_in_the_bucket(
    served: Served, stack: Stack, tmp_path: Path
) -> None:
    # the gateway is gone; the labels name the ids its callers got back
    truth = [i % 3 == 0 for i in range(len(served.answers))]
    labels = tmp_path / "labels.csv"
    lines = [f"{a['id']},{int(y)}" for a, y in zip(served.answers, truth, strict=True)]
    labels.write_text("prediction_id,label\n" + "\n".join(lines) + "\n")

    result = report(stack, labels, served.env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    got = json.loads(result.stdout)
    n = len(served.answers)
    assert got["model"] == MODEL and got["kind"] == "binary"
    feedback = got["feedback"]
    assert feedback.pop("accepted") == n and set(feedback.values()) == {0}, got["feedback"]
    assert [(v["model"], v["version"], v["role"], v["rows"]) for v in got["versions"]] == [
        (MODEL, served.version, "champion", n)
    ]
    metrics = got["versions"][0]["metrics"]
    scores = [a["score"] for a in served.answers]
    assert metrics["auc"] == pytest.approx(hand_auc(truth, scores), abs=1e-6)
    decided = [a["label"] == 1 for a in served.answers]  # the answer each caller got
    assert metrics["accuracy"] == pytest.approx(sum(d == y for d, y in zip(decided, truth, strict=True)) / n)
    assert {"log_loss", "precision", "recall", "ece"} <= set(metrics)


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ("no-such-bucket", "no payload log of model"),  # a typo in the bucket: nothing there
        ("unreachable", "cannot read the payload log at s3://"),  # the endpoint does not answer
    ],
)
def test_a_wrong_bucket_or_endpoint_is_one_error_line(
    served: Served, stack: Stack, tmp_path: Path, where: str, words: str
) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text(f"prediction_id,label\n{served.ids[0]},1\n")
    env, log = dict(served.env), LOG
    if where == "no-such-bucket":
        log = "s3://ml-payload-logz/payload-log"
    else:
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{servers.free_port()}"  # nothing listens there
    result = report(stack, labels, env, log)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
