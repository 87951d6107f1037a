"""The client's wire, held to the a2a-sdk's own types as the oracle: tasks and
stream events built with the SDK (protobuf, dumped to ProtoJSON as its
servers send them) are read into the right outcome, and every request the
client builds parses strictly as the SDK's request type."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from agentik.a2a_client._wire import (
    APPROVAL_SCHEMA,
    TEXT_SCHEMA,
    Asks,
    Done,
    Failed,
    Pending,
    Question,
    answer_parts,
    data_part,
    fold,
    outcome,
    send_params,
    text_part,
    user_message,
)

STATES = [s for s in TaskState.keys() if s != "TASK_STATE_UNSPECIFIED"]  # noqa: SIM118
texts = st.text(st.characters(whitelist_categories=("L", "N", "P")), min_size=1, max_size=30)
"""Words: what ``shown`` keeps as it is (it folds whitespace runs into one space)."""


def as_json(message: Any) -> dict[str, Any]:
    value: dict[str, Any] = json_format.MessageToDict(message)
    return value


def sdk_task(state: str, answers: list[str], said: str | None) -> dict[str, Any]:
    status = TaskStatus(state=TaskState.Value(state))
    if said is not None:
        status.message.CopyFrom(
            Message(message_id="s", role=Role.ROLE_AGENT, parts=[Part(text=said)])
        )
    task = Task(id="t1", context_id="c1", status=status)
    for i, answer in enumerate(answers):
        task.artifacts.append(Artifact(artifact_id=f"a{i}", parts=[Part(text=answer)]))
    return as_json(task)


@given(st.sampled_from(STATES), st.lists(texts, max_size=3), st.none() | texts)
def test_every_state_maps_to_its_outcome(state: str, answers: list[str], said: str | None) -> None:
    """COMPLETED is the answer (artifacts, else the status message); SUBMITTED and
    WORKING are followed; INPUT_REQUIRED asks; every other state is an error
    naming the agent and quoting what it said."""
    found = outcome("remote", sdk_task(state, answers, said))
    if state == "TASK_STATE_COMPLETED":
        assert isinstance(found, Done)
        expected = (
            "\n".join(answers) or said or "a2a agent 'remote' completed the task with no text"
        )
        assert found.text == expected
    elif state in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
        assert found == Pending(state)
    elif state == "TASK_STATE_INPUT_REQUIRED":
        assert isinstance(found, Asks)
        assert found.question.kind == "text"
        assert found.question.message == (said or "a2a agent 'remote' needs more input")
    else:
        assert isinstance(found, Failed)
        assert found.message.startswith("a2a agent 'remote' ")
        if said is not None:
            assert found.message.endswith(f": {said}")


@given(st.text(max_size=20).filter(lambda s: s not in TaskState.keys()))  # noqa: SIM118
def test_an_unknown_state_is_an_error(state: str) -> None:
    task = {"id": "t", "status": {"state": state}}
    found = outcome("remote", task)
    assert isinstance(found, Failed)
    assert "unknown here" in found.message


def test_an_agentik_question_keeps_its_schema_and_id() -> None:
    """An agentik agent's tool question (data part ``elicitation``) is asked with
    its own schema, and answered on it by id."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    task = {
        "id": "t",
        "status": {
            "state": "TASK_STATE_INPUT_REQUIRED",
            "message": {
                "messageId": "m",
                "role": "ROLE_AGENT",
                "parts": [
                    {"text": "where?"},
                    {
                        "data": {
                            "elicitation": {
                                "id": "q1",
                                "message": "Which city?",
                                "requestedSchema": schema,
                            }
                        }
                    },
                ],
            },
        },
    }
    found = outcome("remote", task)
    assert found == Asks(
        Question(message="Which city?", schema=schema, kind="elicitation", remote_id="q1")
    )
    assert answer_parts(found.question, "accept", {"city": "Oslo"}) == [
        data_part({"elicitation": "q1", "action": "accept", "content": {"city": "Oslo"}})
    ]


@given(st.sampled_from(["accept", "decline", "cancel"]), st.booleans(), st.none() | texts)
def test_answers_go_back_as_the_question_asks(
    action: str, approve: bool, reason: str | None
) -> None:
    """Approvals go back as a decision (a refusal denies); a plain question's refusal
    stops the task (None), its acceptance is the text."""
    approval = Question(message="m", schema=APPROVAL_SCHEMA, kind="approval")
    content: dict[str, Any] = {"approve": approve}
    if reason is not None:
        content["reason"] = reason
    (part,) = answer_parts(approval, action, content) or [None]
    assert part is not None
    assert part["data"]["approve"] is (approve and action == "accept")
    plain = Question(message="m", schema=TEXT_SCHEMA, kind="text")
    answered = answer_parts(plain, action, {"text": reason or ""})
    assert answered == ([text_part(reason or "")] if action == "accept" else None)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("status"), st.sampled_from(STATES)),
            st.tuples(st.just("artifact"), texts, st.booleans()),
        ),
        max_size=8,
    )
)
def test_a_stream_folds_into_the_task_getTask_would_show(events: list[tuple[Any, ...]]) -> None:
    """Status updates replace the status; artifact updates add (or, with ``append``,
    extend) the one artifact; the result reads as the same outcome as the task
    the SDK would hold."""
    first = Task(id="t1", context_id="c1", status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
    expected = Task()
    expected.CopyFrom(first)
    task, reply = fold(None, as_json(StreamResponse(task=first)))
    assert reply is None
    for event in events:
        if event[0] == "status":
            status = TaskStatus(state=TaskState.Value(event[1]))
            update = StreamResponse(
                status_update=TaskStatusUpdateEvent(task_id="t1", context_id="c1", status=status)
            )
            expected.status.CopyFrom(status)
        else:
            _, text, append = event
            artifact = Artifact(artifact_id="answer", parts=[Part(text=text)])
            update = StreamResponse(
                artifact_update=TaskArtifactUpdateEvent(
                    task_id="t1", context_id="c1", artifact=artifact, append=append
                )
            )
            if expected.artifacts and append:
                expected.artifacts[0].parts.append(Part(text=text))
            elif expected.artifacts:
                expected.artifacts[0].CopyFrom(artifact)
            else:
                expected.artifacts.append(artifact)
        task, reply = fold(task, as_json(update))
        assert reply is None
    assert task is not None
    assert outcome("remote", task) == outcome("remote", as_json(expected))


def test_an_event_of_another_task_is_refused() -> None:
    task, _ = fold(None, {"task": {"id": "t1", "status": {"state": "TASK_STATE_WORKING"}}})
    with pytest.raises(Exception, match="of task 't2' in the stream of 't1'"):
        fold(task, {"statusUpdate": {"taskId": "t2", "status": {"state": "TASK_STATE_WORKING"}}})


@given(
    texts,
    st.none() | st.dictionaries(texts, st.integers() | texts, max_size=3),
    st.none() | texts,
    st.none() | texts,
    st.booleans(),
)
def test_requests_parse_strictly_as_the_sdks(
    text: str,
    data: dict[str, Any] | None,
    context: str | None,
    task_id: str | None,
    immediately: bool,
) -> None:
    """Every message the client sends is a valid SendMessageRequest: no field the SDK
    does not know, none of the wrong type."""
    parts = [text_part(text)] + ([data_part(data)] if data is not None else [])
    message = user_message(parts, message_id="m1", context_id=context, task_id=task_id)
    params = send_params(message, return_immediately=immediately)
    parsed = json_format.ParseDict(params, SendMessageRequest())
    assert parsed.message.parts[0].text == text
    assert parsed.message.role == Role.ROLE_USER
    assert parsed.configuration.return_immediately is immediately
    assert as_json(parsed) == params or data is not None  # ints come back as floats
