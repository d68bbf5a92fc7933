// Drives the real npm clients against a codellm serve started by clients_test.go:
//   node run.mjs SCENARIO   (env CODELLM_BASE_URL = http://127.0.0.1:PORT/v1, CODELLM_API_KEY)
// Prints one JSON object on stdout; the Go test checks it. Each scenario is also the tested form of a
// snippet in docs/clients.md.
import OpenAI from 'openai';
import { z } from 'zod';
// The other clients load only in their own scenario (each node start stays short).

const baseURL = process.env.CODELLM_BASE_URL;
const apiKey = process.env.CODELLM_API_KEY;
const fence = '```';
const block = (lang, code) => `${fence}${lang}\n${code}\n${fence}\n`;
const answer = (a) => block('bash', `echo '{"answer":"${a}"}'`);
const writeNote = block('python', `import json; print(json.dumps({"changes": [{"path": "a.md", "content": "hi"}], "answer": "wrote"}))`);

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

// Function tools as fleet offers them (chat-completions shape).
const fnTools = ['write_note', 'finish'].map((name) => ({
  type: 'function',
  function: { name, parameters: { type: 'object', properties: {}, additionalProperties: true } },
}));

async function apiError(fn) {
  try {
    await fn();
    return { ok: true };
  } catch (e) {
    return { name: e.constructor.name, status: e.status, code: e.code, type: e.type, message: e.message };
  }
}

// runTools drives openai-node's runner (chat.completions.runTools) with options (none: its defaults) and
// returns the tools it executed and its final content.
async function runTools(c, options) {
  const executed = [];
  const tools = ['write_note', 'finish'].map((name) => ({
    type: 'function',
    function: { name, parameters: { type: 'object', properties: {}, additionalProperties: true }, parse: JSON.parse,
      function: (args) => { executed.push(name); return name === 'finish' ? args.answer : 'ok'; } },
  }));
  const run = c.chat.completions.runTools({ model: 'codellm', messages: [{ role: 'user', content: writeNote }], tools }, options);
  const text = await run.finalContent();
  return { executed, text };
}

// The two tools of the agent-framework scenarios, with the arguments each records when it runs.
const noteArgs = z.object({ path: z.string(), content: z.string() });
const finishArgs = z.object({ answer: z.string() });
const ran = (executed, name) => (a) => {
  executed.push(name === 'finish' ? 'finish:' + a.answer : 'write_note:' + a.path);
  return name === 'finish' ? a.answer : 'ok';
};

const scenarios = {
  // openai-node: chat.completions.create without streaming.
  async chat() {
    const r = await client.chat.completions.create({ model: 'codellm', messages: [{ role: 'user', content: writeNote }], tools: fnTools });
    const m = r.choices[0].message;
    return { content: m.content, finish_reason: r.choices[0].finish_reason, fingerprint: r.system_fingerprint,
      calls: m.tool_calls.map((c) => ({ id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments) })) };
  },
  // openai-node: streaming with the SDK's own accumulator (chat.completions.stream).
  async stream() {
    const s = client.chat.completions.stream({ model: 'codellm', messages: [{ role: 'user', content: writeNote }] });
    let chunks = 0;
    for await (const _ of s) chunks++;
    const r = await s.finalChatCompletion();
    return { chunks, calls: r.choices[0].message.tool_calls.map((c) => ({ id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments) })) };
  },
  async error422() {
    return apiError(() => client.chat.completions.create({ model: 'codellm', messages: [{ role: 'user', content: block('bash', 'echo boom >&2; exit 3') }] }));
  },
  async error401() {
    const bad = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
    return apiError(() => bad.chat.completions.create({ model: 'codellm', messages: [{ role: 'user', content: answer('x') }] }));
  },
  async models() {
    const list = await client.models.list();
    const one = await client.models.retrieve('codellm');
    const missing = await apiError(() => client.models.retrieve('gpt-4o'));
    return { ids: list.data.map((m) => m.id), retrieved: one.id, missing };
  },
  // openai-node: the Responses API, without and with streaming.
  async responses() {
    const r = await client.responses.create({ model: 'codellm', instructions: 'Run the block.', input: writeNote });
    const s = await client.responses.create({ model: 'codellm', input: [{ role: 'user', content: [{ type: 'input_text', text: answer('streamed') }] }], stream: true });
    const events = [];
    let completed;
    for await (const ev of s) {
      events.push(ev.type);
      if (ev.type === 'response.completed') completed = ev.response;
    }
    const calls = (resp) => resp.output.map((o) => ({ type: o.type, call_id: o.call_id, name: o.name, args: JSON.parse(o.arguments) }));
    return { status: r.status, calls: calls(r), events, streamed: calls(completed) };
  },
  // openai-node: the Responses API as a resource — retrieve, input_items, a previous_response_id follow-up
  // that sends only the function_call_output items (the stored calls meet the re-execution guard), delete,
  // and a failed streamed run (response.failed).
  async responsesResource() {
    const r = await client.responses.create({ model: 'codellm', input: writeNote, metadata: { role: 'indexer' }, temperature: 0.5 });
    const got = await client.responses.retrieve(r.id);
    const items = await client.responses.inputItems.list(r.id);
    const next = await client.responses.create({ model: 'codellm', previous_response_id: r.id,
      input: r.output.map((o) => ({ type: 'function_call_output', call_id: o.call_id, output: 'ok' })) });
    await client.responses.delete(r.id);
    const gone = await apiError(() => client.responses.retrieve(r.id));
    const events = [];
    let failure;
    for await (const ev of await client.responses.create({ model: 'codellm', input: block('bash', 'echo boom >&2; exit 3'), stream: true })) {
      events.push(ev.type);
      if (ev.type === 'response.failed') failure = ev.response.error;
    }
    return { same: JSON.stringify(got) === JSON.stringify(r), metadata: got.metadata, temperature: got.temperature,
      items: items.data.map((i) => i.type + ':' + i.role), next: { text: next.output_text, status: next.status, previous: next.previous_response_id === r.id },
      gone, events, failure };
  },
  // openai-node retries on its own timeout (2 retries by default): the code must still run once.
  async retry() {
    const impatient = new OpenAI({ baseURL, apiKey, timeout: 1000, maxRetries: 4 });
    const r = await impatient.chat.completions.create({ model: 'codellm', messages: [{ role: 'user', content: block('bash', `sleep 2.5; echo '{"answer":"slow"}'`) }] });
    return { answer: JSON.parse(r.choices[0].message.tool_calls[0].function.arguments).answer };
  },
  // openai-node's automatic tool loop: maxChatCompletions: 1 stops it after codellm's one answer; with
  // the defaults (maxChatCompletions 10) it sends the tool results back and ends at the guard's final text.
  async runTools() {
    const one = await runTools(client, { maxChatCompletions: 1 });
    return { oneStep: one.executed, ...(await runTools(client)) };
  },
  // The same default loop on openai-node 7 (the package alias openai-7).
  async runTools7() {
    const { default: OpenAI7 } = await import('openai-7');
    return runTools(new OpenAI7({ baseURL, apiKey, maxRetries: 0 }));
  },
  // AI SDK 6 over @ai-sdk/openai-compatible: generateText, streamText and an agent stopped by
  // stopWhen: hasToolCall('finish').
  async aisdk() {
    const { createOpenAICompatible } = await import('@ai-sdk/openai-compatible');
    const { generateText, streamText, tool, hasToolCall, ToolLoopAgent } = await import('ai');
    const codellm = createOpenAICompatible({ name: 'codellm', baseURL, apiKey });
    const executed = [];
    const tools = {
      write_note: tool({ inputSchema: z.object({ path: z.string(), content: z.string() }), execute: async (a) => { executed.push('write_note:' + a.path); return 'ok'; } }),
      finish: tool({ inputSchema: z.object({ answer: z.string() }), execute: async (a) => { executed.push('finish:' + a.answer); return a.answer; } }),
    };
    const g = await generateText({ model: codellm('codellm'), prompt: writeNote, tools, stopWhen: hasToolCall('finish') });
    const s = streamText({ model: codellm('codellm'), prompt: writeNote, tools, stopWhen: hasToolCall('finish') });
    const streamedCalls = (await s.toolCalls).map((c) => c.toolName);
    const agent = new ToolLoopAgent({ model: codellm('codellm'), tools, stopWhen: hasToolCall('finish') });
    const a = await agent.generate({ prompt: writeNote });
    // The default agent (stopWhen stepCountIs(20)) ends at the guard's final text after two steps.
    const loose = new ToolLoopAgent({ model: codellm('codellm'), tools });
    const l = await loose.generate({ prompt: writeNote });
    return { steps: g.steps.length, text: g.text, calls: g.toolCalls.map((c) => c.toolName), streamedCalls,
      agentSteps: a.steps.length, looseSteps: l.steps.length, looseText: l.text, executed };
  },
  // AI SDK 6 over its OpenAI provider @ai-sdk/openai: openai('…') speaks the Responses API,
  // openai.chat('…') chat completions; generateText and streamText with stopWhen: hasToolCall('finish').
  async aisdkOpenAI() {
    const { createOpenAI } = await import('@ai-sdk/openai');
    const { generateText, streamText, tool, hasToolCall, ToolLoopAgent } = await import('ai');
    const openai = createOpenAI({ baseURL, apiKey });
    const executed = [];
    const tools = {
      write_note: tool({ inputSchema: z.object({ path: z.string(), content: z.string() }), execute: async (a) => { executed.push('write_note:' + a.path); return 'ok'; } }),
      finish: tool({ inputSchema: z.object({ answer: z.string() }), execute: async (a) => { executed.push('finish:' + a.answer); return a.answer; } }),
    };
    const out = {};
    for (const [api, model] of [['responses', openai('codellm')], ['chat', openai.chat('codellm')]]) {
      const g = await generateText({ model, prompt: writeNote, tools, stopWhen: hasToolCall('finish') });
      const s = streamText({ model, prompt: writeNote, tools, stopWhen: hasToolCall('finish') });
      const streamed = (await s.toolCalls).map((c) => c.toolName);
      out[api] = { steps: g.steps.length, calls: g.toolCalls.map((c) => c.toolName), streamed, streamedSteps: (await s.steps).length,
        finishReason: g.finishReason, results: g.toolResults.map((r) => r.output) };
    }
    // With hasToolCall('finish') an agent takes one step; with its defaults (stepCountIs(20)) the second
    // step sends function_call_output items and codellm's guard answers with a final message.
    const agent = new ToolLoopAgent({ model: openai('codellm'), tools, stopWhen: hasToolCall('finish') });
    out.agentSteps = (await agent.generate({ prompt: writeNote })).steps.length;
    const loose = await new ToolLoopAgent({ model: openai('codellm'), tools }).generate({ prompt: writeNote });
    out.looseSteps = loose.steps.length;
    out.looseText = loose.text;
    return { ...out, executed };
  },
  // @openai/agents (Responses API by default): toolUseBehavior stopAtToolNames ['finish'] ends the run at
  // codellm's one answer; without it the second turn (which sends function_call_output items) is
  // answered by the guard, and a reused call id would have thrown ModelBehaviorError there.
  async agents() {
    const { Agent, run, tool: agentTool, setDefaultOpenAIClient, setTracingDisabled } = await import('@openai/agents');
    setTracingDisabled(true);
    setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey, maxRetries: 0 }));
    const executed = [];
    const tools = [
      agentTool({ name: 'write_note', description: 'write a note', parameters: z.object({ path: z.string(), content: z.string() }),
        execute: async (a) => { executed.push('write_note:' + a.path); return 'ok'; } }),
      agentTool({ name: 'finish', description: 'finish', parameters: z.object({ answer: z.string() }),
        execute: async (a) => { executed.push('finish:' + a.answer); return a.answer; } }),
    ];
    const agent = new Agent({ name: 'codellm', model: 'codellm', instructions: writeNote, tools, toolUseBehavior: { stopAtToolNames: ['finish'] } });
    const r = await run(agent, 'Begin.');
    // With the defaults (maxTurns 10) the second turn sends the outputs back and the guard's final
    // message ends the run.
    const loose = await run(new Agent({ name: 'loose', model: 'codellm', instructions: writeNote, tools }), 'Begin.');
    return { finalOutput: r.finalOutput, executed, looseOutput: loose.finalOutput };
  },
  // LangChain's createAgent (npm langchain, on LangGraph) with finish as a returnDirect tool: the run ends
  // after the tools of codellm's one answer; without returnDirect the agent asks again (the guard answers
  // finish each time) until LangGraph's recursion limit.
  async langchainAgent() {
    const { createAgent, tool: lcTool } = await import('langchain');
    const { ChatOpenAI } = await import('@langchain/openai');
    const model = new ChatOpenAI({ model: 'codellm', apiKey, configuration: { baseURL }, maxRetries: 0 });
    const executed = [];
    const mk = (returnDirect) => [
      lcTool(async (a) => { executed.push('write_note:' + a.path); return 'ok'; },
        { name: 'write_note', description: 'write a note', schema: z.object({ path: z.string(), content: z.string() }) }),
      lcTool(async (a) => { executed.push('finish:' + a.answer); return a.answer; },
        { name: 'finish', description: 'finish', schema: z.object({ answer: z.string() }), returnDirect }),
    ];
    const agent = createAgent({ model, tools: mk(true), systemPrompt: writeNote });
    const r = await agent.invoke({ messages: [{ role: 'user', content: 'Begin.' }] });
    const last = r.messages[r.messages.length - 1];
    const stopped = executed.splice(0);
    // With the defaults (recursionLimit 25) the agent asks again and ends at the guard's final message.
    const loose = await createAgent({ model, tools: mk(false), systemPrompt: writeNote }).invoke({ messages: [{ role: 'user', content: 'Begin.' }] });
    const looseLast = loose.messages[loose.messages.length - 1];
    return { messages: r.messages.map((m) => m.type), last: { type: last.type, name: last.name, content: last.content }, stopped, loose: executed,
      looseMessages: loose.messages.map((m) => m.type), looseLast: { type: looseLast.type, content: looseLast.content } };
  },
  // LangChain JS retries around openai-node on its own timeout, each attempt with X-Stainless-Retry-Count: 0
  // and no Idempotency-Key: with its defaults (maxRetries 6) and a 1 s timeout on a 2.5 s block, the later
  // attempts attach to the running first one or get its answer, and the code runs once.
  async langchainTimeout() {
    const { ChatOpenAI } = await import('@langchain/openai');
    const llm = new ChatOpenAI({ model: 'codellm', apiKey, configuration: { baseURL }, timeout: 1000 });
    const r = await llm.invoke([{ role: 'user', content: block('bash', `sleep 2.5; echo '{"answer":"slow"}'`) }]);
    return { answer: r.tool_calls[0].args.answer };
  },
  // LangChain JS ChatOpenAI: gpt-5* ids send the system prompt as role developer; bindTools, invoke and stream.
  async langchain() {
    const { ChatOpenAI } = await import('@langchain/openai');
    const { SystemMessage, HumanMessage } = await import('@langchain/core/messages');
    const llm = new ChatOpenAI({ model: 'gpt-5-mini', apiKey, configuration: { baseURL }, maxRetries: 0 });
    const withTools = llm.bindTools(fnTools);
    const msgs = [new SystemMessage(writeNote), new HumanMessage('Begin.')];
    const r = await withTools.invoke(msgs);
    let streamed = null;
    for await (const chunk of await withTools.stream(msgs)) streamed = streamed ? streamed.concat(chunk) : chunk;
    const bad = await apiError(() => llm.invoke([new HumanMessage(block('bash', 'exit 4'))]));
    return { calls: r.tool_calls.map((c) => c.name), args: r.tool_calls.map((c) => c.args), streamed: streamed.tool_calls.map((c) => c.name), bad };
  },
  // Mastra (@mastra/core): an Agent on an OpenAI-compatible endpoint, default settings (maxSteps 5).
  async mastra() {
    const { Agent } = await import('@mastra/core/agent');
    const { createTool } = await import('@mastra/core/tools');
    const executed = [];
    const tools = {
      write_note: createTool({ id: 'write_note', description: 'write a note', inputSchema: noteArgs, execute: ran(executed, 'write_note') }),
      finish: createTool({ id: 'finish', description: 'finish', inputSchema: finishArgs, execute: ran(executed, 'finish') }),
    };
    const agent = new Agent({ id: 'codellm', name: 'codellm', instructions: writeNote, model: { id: 'codellm/codellm', url: baseURL, apiKey }, tools });
    const r = await agent.generate('Begin.');
    return { executed, text: r.text };
  },
  // LlamaIndex TS (@llamaindex/workflow's agent() over @llamaindex/openai): agent() has no step option.
  async llamaindex() {
    const { agent } = await import('@llamaindex/workflow');
    const { openai } = await import('@llamaindex/openai');
    const { tool } = await import('@llamaindex/core/tools');
    const executed = [];
    const tools = [
      tool({ name: 'write_note', description: 'write a note', parameters: noteArgs, execute: ran(executed, 'write_note') }),
      tool({ name: 'finish', description: 'finish', parameters: finishArgs, execute: ran(executed, 'finish') }),
    ];
    const r = await agent({ tools, llm: openai({ model: 'codellm', apiKey, baseURL }), systemPrompt: writeNote }).run('Begin.');
    return { executed, text: r.data.result };
  },
  // pi-agent (@mariozechner/pi-agent-core on pi-ai's openai-completions API): Agent.prompt runs until the
  // model stops calling tools; it has no step cap.
  async piagent() {
    const { Agent } = await import('@mariozechner/pi-agent-core');
    const { Type } = await import('@mariozechner/pi-ai');
    const executed = [];
    const model = { id: 'codellm', name: 'codellm', api: 'openai-completions', provider: 'codellm', baseUrl: baseURL, reasoning: false,
      input: ['text'], cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 128000, maxTokens: 4096 };
    const piTool = (name, parameters) => ({ name, label: name, description: name, parameters,
      execute: async (id, a) => ({ content: [{ type: 'text', text: ran(executed, name)(a) }], details: {} }) });
    const tools = [piTool('write_note', Type.Object({ path: Type.String(), content: Type.String() })),
      piTool('finish', Type.Object({ answer: Type.String() }))];
    const agent = new Agent({ initialState: { systemPrompt: writeNote, model, tools }, getApiKey: () => apiKey });
    await agent.prompt('Begin.');
    const last = agent.state.messages.at(-1);
    return { executed, text: last.content.map((c) => c.text).join(''), stopReason: last.stopReason };
  },
  // Genkit (genkit + @genkit-ai/compat-oai's openAICompatible plugin), ai.generate's defaults (maxTurns 5).
  async genkit() {
    const { genkit } = await import('genkit');
    const { openAICompatible } = await import('@genkit-ai/compat-oai');
    const executed = [];
    const ai = genkit({ plugins: [openAICompatible({ name: 'codellm', apiKey, baseURL })] });
    const tools = [
      ai.defineTool({ name: 'write_note', description: 'write a note', inputSchema: noteArgs }, ran(executed, 'write_note')),
      ai.defineTool({ name: 'finish', description: 'finish', inputSchema: finishArgs }, ran(executed, 'finish')),
    ];
    const r = await ai.generate({ model: 'codellm/codellm', system: writeNote, prompt: 'Begin.', tools });
    return { executed, text: r.text };
  },
  // VoltAgent (@voltagent/core on an AI SDK model), agent.generateText's defaults.
  async voltagent() {
    const { Agent, createTool } = await import('@voltagent/core');
    const { createOpenAICompatible } = await import('@ai-sdk/openai-compatible');
    const executed = [];
    const tools = [
      createTool({ name: 'write_note', description: 'write a note', parameters: noteArgs, execute: ran(executed, 'write_note') }),
      createTool({ name: 'finish', description: 'finish', parameters: finishArgs, execute: ran(executed, 'finish') }),
    ];
    const model = createOpenAICompatible({ name: 'codellm', baseURL, apiKey })('codellm');
    const r = await new Agent({ name: 'codellm', instructions: writeNote, model, tools }).generateText('Begin.');
    return { executed, text: r.text };
  },
  // Strands Agents (@strands-agents/sdk): OpenAIModel speaks the Responses API by default; api: 'chat'
  // (scenario strandsChat) uses chat completions, whose stream adapter keeps only the last of several calls.
  async strands() {
    return strands();
  },
  async strandsChat() {
    return strands('chat');
  },
};

async function strands(api) {
  const { Agent, tool } = await import('@strands-agents/sdk');
  const { OpenAIModel } = await import('@strands-agents/sdk/models/openai');
  const executed = [];
  const tools = [
    tool({ name: 'write_note', description: 'write a note', inputSchema: noteArgs, callback: ran(executed, 'write_note') }),
    tool({ name: 'finish', description: 'finish', inputSchema: finishArgs, callback: ran(executed, 'finish') }),
  ];
  const model = new OpenAIModel({ ...(api ? { api } : {}), modelId: 'codellm', apiKey, clientConfig: { baseURL } });
  const r = await new Agent({ model, tools, systemPrompt: writeNote, printer: false }).invoke('Begin.');
  return { executed, text: String(r), stopReason: r.stopReason };
}

const name = process.argv[2];
if (!scenarios[name]) {
  console.error(`unknown scenario ${name}`);
  process.exit(2);
}
try {
  const out = JSON.stringify(await scenarios[name]());
  // Exit explicitly: some frameworks keep timers or sockets open after their run (VoltAgent's
  // observability, models.dev lookups), which would keep node alive.
  process.stdout.write(out + '\n', () => process.exit(0));
} catch (e) {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
}
