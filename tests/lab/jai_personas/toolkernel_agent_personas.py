"""Jupyter AI personas for the scripted ACP agent of tests/acp_agent.py (test fixtures).

tests/lab/test_jupyter_ai.py links this file into its Lab's `.jupyter/personas/`, where Jupyter AI
finds local personas (a file whose name holds "persona"); the agent is found from here through
the link. Two personas, one per mode: one forwards toolkernel's elicitation to the chat's
buttons, the other does not, so its questions show through toolkernel's own JupyterLab UI.
"""

import sys
from pathlib import Path

from jupyter_ai_acp_client.base_acp_persona import BaseAcpPersona
from jupyter_ai_persona_manager import PersonaDefaults

AGENT = Path(__file__).resolve().parents[2] / "acp_agent.py"
AVATAR = str(Path(__file__).resolve().parent / "avatar.svg")


class ForwardingAgentPersona(BaseAcpPersona):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, executable=[sys.executable, str(AGENT), "--forward"], **kwargs)

    @property
    def defaults(self) -> PersonaDefaults:
        return PersonaDefaults(name="Forwarder", avatar_path=AVATAR, system_prompt="unused",
                               description="A scripted agent that asks you in the chat when toolkernel asks it.")


class QuietAgentPersona(BaseAcpPersona):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, executable=[sys.executable, str(AGENT)], **kwargs)

    @property
    def defaults(self) -> PersonaDefaults:
        return PersonaDefaults(name="Quiet", avatar_path=AVATAR, system_prompt="unused",
                               description="A scripted agent that does not forward toolkernel's questions.")


