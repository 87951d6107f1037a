// Runs one AG-UI run with the official npm client (@ag-ui/client HttpAgent)
// and prints what the client saw as JSON: event types, new messages, state.
// Usage: node agui_client.mjs URL THREAD_ID TEXT [TOKEN]
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, text, token] = process.argv.slice(2);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const agent = new HttpAgent({ url, threadId, headers, initialMessages: [] });
agent.addMessage({ id: "u-" + Date.now(), role: "user", content: text });
const types = [];
let failure = null;
try {
  const { result, newMessages } = await agent.runAgent(
    { runId: "run-" + Date.now(), tools: [], context: [], forwardedProps: {} },
    {
      onEvent: ({ event }) => {
        types.push(event.type);
      },
      onRunFailed: ({ error }) => {
        failure = String(error);
      },
    },
  );
  console.log(JSON.stringify({ types, newMessages, state: agent.state, result: result ?? null, failure }));
} catch (error) {
  console.log(JSON.stringify({ types, failure: String(error) }));
}
