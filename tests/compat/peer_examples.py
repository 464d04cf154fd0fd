"""The peer library's own quick-start code, verbatim, for the port test (test_peer_paths.py).

Copied from github.com/generative-computing/mellea at commit 55d00800 (Apache-2.0):
docs/docs/getting-started/quickstart.md ("Hello world", "Requirements") and
docs/docs/how-to/write-custom-verifiers.md ("Writing a full validation function", "Composing
multiple verifiers"). The test ports each by replacing ``mellea`` with ``mellea_local`` and
nothing else.
"""

QUICKSTART_HELLO = '''\
import mellea

m = mellea.start_session()
email = m.instruct("Write an email inviting interns to an office party at 3:30pm.")
print(str(email))
'''

QUICKSTART_REQUIREMENTS = '''\
import mellea

def write_email(m: mellea.MelleaSession, name: str, notes: str) -> str:
    email = m.instruct(
        "Write an email to {{name}} using the notes following: {{notes}}.",
        requirements=[
            "The email should have a salutation.",
            "Use only lower-case letters.",
        ],
        user_variables={"name": name, "notes": notes},
    )
    return str(email)

m = mellea.start_session()
print(write_email(m, name="Olivia", notes="Organized intern events."))
'''

VERIFIERS = '''\
import re
from mellea.core import Context, ValidationResult

def validate_email_format(ctx: Context) -> ValidationResult:
    """Check that the output is a valid email address."""
    output = ctx.last_output()
    text = output.value.strip() if output and output.value else ""

    email_pattern = r"^[a-zA-Z0-9._%+\\-]+@[a-zA-Z0-9.\\-]+\\.[a-zA-Z]{2,}$"
    if re.match(email_pattern, text):
        return ValidationResult(True)
    return ValidationResult(
        False,
        reason=f"'{text}' is not a valid email address. Respond with only a single email address.",
    )
''' + '''
from mellea import start_session
from mellea.core import Requirement
from mellea.stdlib.requirements import req, check, simple_validate
from mellea.stdlib.sampling import RejectionSamplingStrategy

m = start_session()
result = m.instruct(
    "Extract the email address from: {{text}}",
    requirements=[
        req(
            "Must be a valid email address.",
            validation_fn=validate_email_format,        # full validator
        ),
        req(
            "Must not include any surrounding text or explanation.",
            validation_fn=simple_validate(              # simple_validate shortcut
                lambda x: "@" in x and " " not in x.strip()
            ),
        ),
        check("Do not include quotes around the email."),  # LLM-as-a-judge, check-only
    ],
    strategy=RejectionSamplingStrategy(loop_budget=3),
    user_variables={"text": "Reach out to support@example.com for help."},
)
print(str(result))
'''

# The imports a literal port of the peer's examples and API pages writes, one per module path.
PEER_IMPORTS = '''\
from mellea.stdlib.requirements import req, check, simple_validate, Requirement, ALoraRequirement
from mellea.stdlib.requirements import LLMaJRequirement, reqify, requirement_check_to_bool
from mellea.stdlib.requirements.requirement import ALoraRequirement as ALoraRequirement2
from mellea.stdlib.components.chat import Message, ToolMessage, as_chat_history
from mellea.stdlib.components.chat import as_generic_chat_history
from mellea.stdlib.components.chat import message_from_template_representation
from mellea.stdlib.components import Document, Instruction, CBlock, Component
from mellea.stdlib.components.react import ReactInitiator, ReactThought, MELLEA_FINALIZER_TOOL
from mellea.stdlib.frameworks.react import react
from mellea.stdlib.context import ChatContext, SimpleContext, WindowCompactor
from mellea.stdlib.context.compactor import LLMSummarizeCompactor, pin_system
from mellea.stdlib.sampling import RejectionSamplingStrategy, RepairTemplateStrategy
from mellea.stdlib.sampling import MultiTurnStrategy, BaseSamplingStrategy, SamplingResult
from mellea.stdlib.session import start_session, MelleaSession
from mellea.core import Backend, CBlock as CoreCBlock, Context, ModelOutputThunk
from mellea.core import Requirement as CoreRequirement, ValidationResult
from mellea.core import PartialValidationResult, default_output_to_bool
from mellea.core import SamplingResult as CoreSamplingResult
from mellea.backends import ModelOption, ModelIdentifier, MelleaTool, tool
from mellea.backends.model_options import ModelOption as ModelOption2
from mellea.backends.tools import MelleaTool as MelleaTool2
from mellea.backends.huggingface import LocalHFBackend
'''
