// Runs AG-UI runs with the official npm client (@ag-ui/client HttpAgent) on
// one thread and prints what the client saw as JSON: event types, new
// messages, state, and its pending interrupts.
// Usage: node agui_client.mjs URL THREAD_ID TEXT [TOKEN]
//    or: node agui_client.mjs URL THREAD_ID STEPS_JSON [TOKEN]
// STEPS_JSON is an array of steps, run in order on the same HttpAgent:
//   {"say": text}          add a user message, run (with "forwardedProps": {...},
//                          run with those forwardedProps)
//   {"content": [parts]}   add a user message of AG-UI input content parts, run
//   {"resume": payload}    answer every pending interrupt (status "resolved",
//                          this payload; payload "cancelled": status
//                          "cancelled"), run
//   {"sayAnyway": text}    add a user message and run without answering the
//                          pending interrupts (the client refuses), then drop it
//   {"again": true}        send the previous run again, as a client that got no
//                          answer does: a new HttpAgent with the messages that
//                          run sent, the same runId (the run's newMessages are
//                          in runs[i].newMessages)
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, script, token] = process.argv.slice(2);
const steps = script.startsWith("[") ? JSON.parse(script) : [{ say: script }];
const headers = token ? { Authorization: `Bearer ${token}` } : {};
let agent = new HttpAgent({ url, threadId, headers, initialMessages: [] });
const types = [];
const runs = [];
let last = { newMessages: [], result: null, failure: null };

async function run(parameters) {
  const seen = { types: [], outcome: null, interrupts: [], failure: null, newMessages: [] };
  const runId = parameters.runId ?? `run-${runs.length + 1}-${Date.now()}`;
  seen.input = { runId, messages: structuredClone(agent.messages) };
  runs.push(seen);
  try {
    const { result, newMessages } = await agent.runAgent(
      { tools: [], context: [], forwardedProps: {}, ...parameters, runId },
      {
        onEvent: ({ event }) => {
          types.push(event.type);
          seen.types.push(event.type);
        },
        onRunFinishedEvent: ({ outcome, interrupts }) => {
          seen.outcome = outcome;
          seen.interrupts = interrupts ?? [];
        },
        onRunFailed: ({ error }) => {
          seen.failure = String(error);
        },
      },
    );
    seen.newMessages = newMessages;
    last = { newMessages, result: result ?? null, failure: seen.failure };
  } catch (error) {
    seen.failure = String(error);
    last = { newMessages: [], result: null, failure: seen.failure };
  }
}

for (const step of steps) {
  if (step.again) {
    const previous = runs[runs.length - 1].input;
    agent = new HttpAgent({ url, threadId, headers, initialMessages: previous.messages });
    await run({ runId: previous.runId });
  } else if (step.say !== undefined || step.sayAnyway !== undefined || step.content !== undefined) {
    const content = step.content ?? step.say ?? step.sayAnyway;
    agent.addMessage({ id: `u-${runs.length}-${Date.now()}`, role: "user", content });
    await run(step.forwardedProps ? { forwardedProps: step.forwardedProps } : {});
    if (step.sayAnyway !== undefined) agent.messages.pop();
  } else {
    const resume = agent.pendingInterrupts.map((interrupt) =>
      step.resume === "cancelled"
        ? { interruptId: interrupt.id, status: "cancelled" }
        : { interruptId: interrupt.id, status: "resolved", payload: step.resume },
    );
    await run({ resume });
  }
}
console.log(
  JSON.stringify({
    types,
    runs,
    newMessages: last.newMessages,
    messages: agent.messages,
    state: agent.state,
    result: last.result,
    failure: last.failure,
    pendingInterrupts: agent.pendingInterrupts,
  }),
);
