from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Value(_message.Message):
    __slots__ = ("int_value", "double_value", "string_value", "bool_value")
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    int_value: int
    double_value: float
    string_value: str
    bool_value: bool
    def __init__(self, int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., bool_value: _Optional[bool] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("fields",)
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.MessageMap[str, Value]
    def __init__(self, fields: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("model", "rows", "explain")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    model: str
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    explain: int
    def __init__(self, model: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., explain: _Optional[int] = ...) -> None: ...

class Reason(_message.Message):
    __slots__ = ("column", "value", "contribution")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    column: str
    value: Value
    contribution: float
    def __init__(self, column: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., contribution: _Optional[float] = ...) -> None: ...

class Explanation(_message.Message):
    __slots__ = ("explains", "units", "base_value", "raw_score", "reasons")
    EXPLAINS_FIELD_NUMBER: _ClassVar[int]
    UNITS_FIELD_NUMBER: _ClassVar[int]
    BASE_VALUE_FIELD_NUMBER: _ClassVar[int]
    RAW_SCORE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    explains: Value
    units: str
    base_value: float
    raw_score: float
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    def __init__(self, explains: _Optional[_Union[Value, _Mapping]] = ..., units: _Optional[str] = ..., base_value: _Optional[float] = ..., raw_score: _Optional[float] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ...) -> None: ...

class Output(_message.Message):
    __slots__ = ("values", "strings", "shape")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    strings: _containers.RepeatedScalarFieldContainer[str]
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[float]] = ..., strings: _Optional[_Iterable[str]] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class Prediction(_message.Message):
    __slots__ = ("score", "label", "probabilities", "defaults_used", "class_label", "value", "outputs", "outlier", "scores", "values", "id", "distances", "explanation")
    class OutputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Output
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Output, _Mapping]] = ...) -> None: ...
    SCORE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    DEFAULTS_USED_FIELD_NUMBER: _ClassVar[int]
    CLASS_LABEL_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTLIER_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DISTANCES_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    score: float
    label: int
    probabilities: _containers.RepeatedScalarFieldContainer[float]
    defaults_used: bool
    class_label: Value
    value: float
    outputs: _containers.MessageMap[str, Output]
    outlier: bool
    scores: _containers.RepeatedScalarFieldContainer[float]
    values: _containers.RepeatedScalarFieldContainer[float]
    id: str
    distances: _containers.RepeatedScalarFieldContainer[float]
    explanation: Explanation
    def __init__(self, score: _Optional[float] = ..., label: _Optional[int] = ..., probabilities: _Optional[_Iterable[float]] = ..., defaults_used: _Optional[bool] = ..., class_label: _Optional[_Union[Value, _Mapping]] = ..., value: _Optional[float] = ..., outputs: _Optional[_Mapping[str, Output]] = ..., outlier: _Optional[bool] = ..., scores: _Optional[_Iterable[float]] = ..., values: _Optional[_Iterable[float]] = ..., id: _Optional[str] = ..., distances: _Optional[_Iterable[float]] = ..., explanation: _Optional[_Union[Explanation, _Mapping]] = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ("model", "model_version", "predictions", "feature_age_seconds", "kind", "classes", "id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    model_version: str
    predictions: _containers.RepeatedCompositeFieldContainer[Prediction]
    feature_age_seconds: float
    kind: str
    classes: _containers.RepeatedCompositeFieldContainer[Value]
    id: str
    def __init__(self, model: _Optional[str] = ..., model_version: _Optional[str] = ..., predictions: _Optional[_Iterable[_Union[Prediction, _Mapping]]] = ..., feature_age_seconds: _Optional[float] = ..., kind: _Optional[str] = ..., classes: _Optional[_Iterable[_Union[Value, _Mapping]]] = ..., id: _Optional[str] = ...) -> None: ...
