"""Tool calls in local models' output: which format a chat template's model writes them in, and a
streaming parser that splits a reply into text for the user and the calls.

    fmt = tool_call_format(chat_template)          # None: offer this model no tools
    parser = ToolCallParser(fmt)
    for delta in stream:
        for event in parser.feed(delta): ...       # TextDelta | ToolCallEvent | MalformedToolCall
    for event in parser.finish(): ...

The formats, and where each is documented, are described in hermes, llama3, mistral, deepseek and
gpt_oss. The markers are the models' special tokens, so the text fed here must be detokenized with
special tokens rendered.
"""

from inference.tool_calls.detect import tool_call_format
from inference.tool_calls.events import (
    Event,
    MalformedToolCall,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolCallFormat,
    new_call_id,
)
from inference.tool_calls.parser import ToolCallParser

__all__ = [
    "Event",
    "MalformedToolCall",
    "TextDelta",
    "ToolCall",
    "ToolCallEvent",
    "ToolCallFormat",
    "ToolCallParser",
    "new_call_id",
    "tool_call_format",
]
