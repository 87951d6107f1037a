"""Hypothesis strategies for agentik's values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from agentik import (
    FilePart,
    ImagePart,
    MemoryEntry,
    Message,
    Reflection,
    Role,
    Skill,
    SkillSummary,
    TextPart,
    TokenStats,
    TokenUsage,
    ToolCall,
)

ids = st.text(min_size=1, max_size=20)
texts = st.text(max_size=200)
counts = st.integers(min_value=0, max_value=2**40)
# Aware UTC datetimes, also ones with a non-UTC offset (stored as UTC).
aware_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
offset_datetimes = st.builds(
    lambda d, minutes: d.astimezone(__import__("datetime").timezone(timedelta(minutes=minutes))),
    aware_datetimes,
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)

tool_calls = st.builds(ToolCall, id=ids, name=ids, arguments=texts)
token_usages = st.builds(TokenUsage, prompt_tokens=counts, completion_tokens=counts)
token_stats = st.builds(TokenStats, prompt_tokens=counts, completion_tokens=counts, messages=counts)
# Content parts: odd bytes (empty too), any text, a url or inline data.
media_types = st.sampled_from(["image/png", "image/jpeg", "application/pdf", "text/plain"])
urls = st.text(min_size=1, max_size=40)
blobs = st.binary(max_size=300)
text_parts = st.builds(TextPart, text=texts)
image_parts = st.builds(ImagePart, url=urls, media_type=st.none() | media_types) | st.builds(
    ImagePart, data=blobs, media_type=media_types
)
file_parts = st.builds(
    FilePart, url=urls, media_type=st.none() | media_types, filename=st.none() | texts
) | st.builds(FilePart, data=blobs, media_type=media_types, filename=st.none() | texts)
parts = text_parts | image_parts | file_parts
messages = st.builds(
    Message,
    role=st.sampled_from(Role),
    content=texts,
    tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    tool_call_id=st.none() | ids,
    usage=st.none() | token_usages,
    seq=st.none() | st.integers(min_value=1, max_value=2**40),
    created_at=st.none() | aware_datetimes,
)
memory_entries = st.builds(
    MemoryEntry, id=counts, conversation_id=ids, text=texts, created_at=aware_datetimes
)
reflections = st.builds(
    Reflection, id=counts, conversation_id=ids, text=texts, created_at=aware_datetimes
)
skills = st.builds(
    Skill, name=ids, description=texts, body=texts, updated_at=st.none() | aware_datetimes
)
skill_summaries = st.builds(SkillSummary, name=ids, description=texts)
