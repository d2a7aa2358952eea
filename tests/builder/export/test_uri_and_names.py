import pytest

from builder.errors import UsageError
from builder.registry.uri import parse_model_uri
from builder.repository.names import validate_model_name


def test_alias_uri():
    uri = parse_model_uri("models:/fraud-detector@champion")
    assert (uri.name, uri.alias, uri.version) == ("fraud-detector", "champion", None)
    assert uri.is_registry


def test_version_uri():
    uri = parse_model_uri("models:/fraud-detector/3")
    assert (uri.name, uri.version, uri.alias) == ("fraud-detector", 3, None)


def test_run_uri():
    uri = parse_model_uri("runs:/0123abcd/model")
    assert (uri.run_id, uri.artifact_path, uri.is_registry) == ("0123abcd", "model", False)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("models:/fraud", "names no version or alias"),
        ("models:/fraud/latest", "ambiguous"),
        ("models:/fraud/0", "not a positive integer"),
        ("models:/fraud/x1", "not a positive integer"),
        ("models:/@champion", "malformed"),
        ("runs:/abc", "malformed run URI"),
        ("s3://bucket/model", "unsupported model URI"),
    ],
)
def test_bad_uris_name_the_problem(text, fragment):
    with pytest.raises(UsageError, match=fragment) as info:
        parse_model_uri(text)
    assert info.value.hint  # every refusal says what form to use


@pytest.mark.parametrize("name", ["fraud-detector", "fraud_v1", "m.2", "A1"])
def test_legal_names(name):
    assert validate_model_name(name) == name


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", "a\\b", "x..y"])
def test_traversal_is_refused(name):
    with pytest.raises(UsageError, match="escape the model repository"):
        validate_model_name(name)


@pytest.mark.parametrize("name", ["", ".hidden", "has space", "-dash", "é", "x" * 129])
def test_illegal_characters_are_refused(name):
    with pytest.raises(UsageError, match="not a legal Triton model name"):
        validate_model_name(name)
