#!/usr/bin/env node
// The job container's command: runs the real pi non-interactively in /workspace and enforces the job's
// limits from outside it, by reading pi's JSON event stream.
//
// Contract (services/worker/pidispatch/worker/{environment,workspace,container,exitline}.py):
//   in:  /job/prompt.md (the whole prompt), /job/event.json, cwd /workspace, env PI_PROVIDER, PI_MODEL,
//        PI_MAX_TURNS, PI_MAX_TOKENS, PI_MAX_COST_MICROS, PI_ALLOWED_MODELS, PI_EXCLUDE_TOOLS,
//        PI_MODEL_BASE_URL, provider keys, forge tokens.
//   out: short JSON progress lines, pi's stderr with every credential value redacted, and as the very
//        last line {"event":"exit","turns":N,"tokens":{...},"exitReason":"..."} (exitReason on exit 2).
//   exit: 0 done; 2 refused by policy (limits, model policy, provider auth); 1 anything else.
//
// Only node's standard library: the image carries pi and nothing else.

import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";

const PI_BIN = process.env.PI_DISPATCH_PI_BIN || "/opt/pi/bin/pi";
const PI_PACKAGE = "/opt/pi/lib/node_modules/@mariozechner/pi-coding-agent";
const PROMPT_FILE = "/job/prompt.md";
// The in-pi half of the limits (see gate.mjs): it stops a request before it is sent and says why here.
const GATE = process.env.PI_DISPATCH_GATE || "/opt/pi-dispatch/gate.mjs";
const GATE_MARK = "pi-dispatch-gate:";
const GATE_REASONS = new Set(["max-turns", "max-tokens", "cost-cap"]);
// pi's built-in tools on by default (pi --help): PI_EXCLUDE_TOOLS is applied as an allowlist of the rest.
const DEFAULT_TOOLS = ["read", "bash", "edit", "write"];
const KILL_GRACE_MS = 5000;
// Shorter values are not redacted: replacing every "abc" in the output would garble it and protect nothing.
const MIN_SECRET_LEN = 4;
const MAX_TEXT = 300;

// Credential variables by name: the ones pi reads, the forge token variables the worker sets, and any
// name that looks like one, so a key forwarded under a new name is still hidden.
const SECRET_NAME = /(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|PAT|AUTH)(_|$)|ACCESS_KEY/i;
const SECRET_NAMES = new Set([
  "ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "GEMINI_API_KEY",
  "GROQ_API_KEY", "CEREBRAS_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY", "ZAI_API_KEY", "MISTRAL_API_KEY",
  "DEEPSEEK_API_KEY", "FIREWORKS_API_KEY", "AI_GATEWAY_API_KEY", "MINIMAX_API_KEY", "MOONSHOT_API_KEY",
  "OPENCODE_API_KEY", "KIMI_API_KEY", "CLOUDFLARE_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "GL_TOKEN",
  "FORGEJO_TOKEN", "GITEA_TOKEN", "AZURE_DEVOPS_EXT_PAT", "AZURE_DEVOPS_TOKEN", "SYSTEM_ACCESSTOKEN",
]);

const secrets = Object.entries(process.env)
  .filter(([name, value]) => value && value.length >= MIN_SECRET_LEN && (SECRET_NAMES.has(name) || SECRET_NAME.test(name)))
  .map(([, value]) => value)
  .sort((a, b) => b.length - a.length); // longest first: a key containing another is hidden whole

function redact(text) {
  let out = String(text);
  for (const value of secrets) out = out.split(value).join("[redacted]");
  return out;
}

function short(text) {
  const t = redact(text).replace(/\s+/g, " ").trim();
  return t.length > MAX_TEXT ? `${t.slice(0, MAX_TEXT)}...` : t;
}

// Every line goes through here: one JSON object per line, free text redacted.
function emit(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

const state = {
  turns: 0,
  input: 0,
  output: 0,
  total: 0,
  cost: 0,
  stop: null, // {reason, detail} once the runner decided to end pi
  lastAssistant: null,
  sawAssistant: false,
};

function finish(code, exitReason) {
  const line = {
    event: "exit",
    turns: state.turns,
    tokens: {
      input: state.input,
      output: state.output,
      total: state.total,
      cost: Math.round(state.cost * 1e6) / 1e6,
    },
  };
  if (code === 2 && exitReason) line.exitReason = exitReason;
  emit(line);
  process.exitCode = code;
}

// A refusal before pi runs: exit 2 with the reason, nothing spent.
function refuse(exitReason, detail) {
  emit({ event: "refused", reason: exitReason, detail: short(detail) });
  finish(2, exitReason);
}

function fail(what, detail) {
  emit({ event: "error", what, detail: short(detail) });
  finish(1);
}

function intEnv(name, { min }) {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return { value: null };
  if (!/^\d+$/.test(raw.trim())) return { error: `${name} is not a whole number` };
  const value = Number(raw.trim());
  if (!Number.isSafeInteger(value) || value < min) return { error: `${name} must be at least ${min}` };
  return { value };
}

function listEnv(name) {
  return (process.env[name] || "").split(",").map((s) => s.trim()).filter(Boolean);
}

// pi keeps its config under $HOME/.pi/agent. The worker sets HOME=/home/pi (mode 1777 in the image),
// but an image run by hand with another HOME, or a read-only one, falls back to /tmp.
function usableHome() {
  const candidates = [process.env.HOME, `/tmp/pi-home-${process.getuid?.() ?? "x"}`];
  for (const home of candidates) {
    if (!home) continue;
    try {
      fs.mkdirSync(path.join(home, ".pi", "agent"), { recursive: true, mode: 0o700 });
      fs.accessSync(path.join(home, ".pi", "agent"), fs.constants.W_OK);
      return home;
    } catch {
      // try the next one
    }
  }
  return null;
}

// PI_MODEL_BASE_URL: the built-in provider keeps its models and auth, only its endpoint moves
// (pi docs/models.md "Overriding Built-in Providers"). An existing models.json is merged, not replaced.
function writeBaseUrl(home, provider, baseUrl) {
  let url;
  try {
    url = new URL(baseUrl);
  } catch {
    return "PI_MODEL_BASE_URL is not a URL";
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return "PI_MODEL_BASE_URL must be http(s)";
  const file = path.join(home, ".pi", "agent", "models.json");
  let config = {};
  try {
    config = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    config = {};
  }
  if (typeof config !== "object" || config === null || Array.isArray(config)) config = {};
  if (typeof config.providers !== "object" || config.providers === null) config.providers = {};
  config.providers[provider] = { ...(config.providers[provider] || {}), baseUrl };
  fs.writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  return null;
}

// The model pi would pick for the provider when PI_MODEL is absent, from the installed pi itself, so the
// model policy checks the model that will really run. Null when this pi does not expose it.
async function defaultModel(provider) {
  try {
    const mod = await import(path.join(PI_PACKAGE, "dist", "core", "model-resolver.js"));
    const id = mod.defaultModelPerProvider?.[provider];
    return typeof id === "string" && id ? id : null;
  } catch {
    return null;
  }
}

const AUTH_REFUSED = /\b(401|403)\b|unauthori[sz]ed|forbidden|invalid[ _-]?(api[ _-]?)?key|incorrect api key|authentication|permission denied/i;

let child = null;
let killTimer = null;

function stopPi(reason, detail) {
  if (state.stop) return;
  state.stop = { reason, detail };
  emit({ event: "limit", reason, detail });
  if (!child) return;
  // pi runs in its own process group: its bash tool's children go with it.
  try {
    process.kill(-child.pid, "SIGTERM");
  } catch {
    // already gone
  }
  killTimer = setTimeout(() => {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }, KILL_GRACE_MS);
  killTimer.unref();
}

function addUsage(usage) {
  if (!usage || typeof usage !== "object") return;
  const n = (v) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : 0);
  const input = n(usage.input) + n(usage.cacheRead) + n(usage.cacheWrite);
  const output = n(usage.output);
  state.input += input;
  state.output += output;
  state.total += n(usage.totalTokens) || input + output;
  state.cost += n(usage.cost?.total);
}

function onEvent(ev, limits) {
  // Whatever pi does after the runner decided to stop it is not the job's work.
  if (state.stop) return;
  switch (ev.type) {
    case "message_start":
      if (ev.message?.role === "assistant" && limits.allowed) checkModel(ev.message, limits.allowed);
      break;
    case "message_end": {
      const msg = ev.message;
      if (msg?.role !== "assistant") break;
      state.sawAssistant = true;
      state.lastAssistant = msg;
      // A turn is a model answer; a failed request that pi retries is not one.
      if (msg.stopReason !== "error") {
        state.turns += 1;
        emit({ event: "turn", n: state.turns });
      }
      if (limits.allowed) checkModel(msg, limits.allowed);
      addUsage(msg.usage);
      emit({
        event: "usage",
        turns: state.turns,
        total: state.total,
        cost: Math.round(state.cost * 1e6) / 1e6,
        stop: typeof msg.stopReason === "string" ? msg.stopReason : undefined,
      });
      if (msg.stopReason === "error" && msg.errorMessage) {
        emit({ event: "model-error", detail: short(msg.errorMessage) });
      }
      if (limits.maxCostMicros !== null && Math.round(state.cost * 1e6) > limits.maxCostMicros) {
        stopPi("cost-cap", `cost ${state.cost} USD exceeds PI_MAX_COST_MICROS=${limits.maxCostMicros}`);
      } else if (limits.maxTokens !== null && state.total > limits.maxTokens) {
        stopPi("max-tokens", `${state.total} tokens exceed PI_MAX_TOKENS=${limits.maxTokens}`);
      }
      break;
    }
    case "turn_end":
      // The model asked for tools, so pi is about to start another turn: stop it at the limit instead.
      if (limits.maxTurns !== null && state.turns >= limits.maxTurns && ev.message?.stopReason === "toolUse") {
        stopPi("max-turns", `another turn would exceed PI_MAX_TURNS=${limits.maxTurns}`);
      }
      break;
    case "tool_execution_start":
      emit({ event: "tool", name: short(ev.toolName ?? "?") });
      break;
    case "auto_retry_start":
      emit({ event: "retry", attempt: ev.attempt, detail: short(ev.errorMessage ?? "") });
      break;
    default:
      break;
  }
}

function checkModel(msg, allowed) {
  if (typeof msg.provider !== "string" || typeof msg.model !== "string") return;
  const used = `${msg.provider}/${msg.model}`.toLowerCase();
  if (!allowed.has(used)) stopPi("model-not-allowed", `${used} is not in PI_ALLOWED_MODELS`);
}

async function main() {
  const provider = (process.env.PI_PROVIDER || "").trim();
  if (!provider) return refuse("config", "PI_PROVIDER is not set");
  let model = (process.env.PI_MODEL || "").trim() || null;

  const maxTurns = intEnv("PI_MAX_TURNS", { min: 1 });
  const maxTokens = intEnv("PI_MAX_TOKENS", { min: 1 });
  const maxCost = intEnv("PI_MAX_COST_MICROS", { min: 0 }); // 0 is a real cap: any spend ends the run
  for (const r of [maxTurns, maxTokens, maxCost]) if (r.error) return refuse("config", r.error);

  const allowedList = listEnv("PI_ALLOWED_MODELS");
  const allowed = allowedList.length ? new Set(allowedList.map((m) => m.toLowerCase())) : null;
  if (allowed) {
    // Checked before pi runs, against the model that will run: an absent PI_MODEL means pi's default.
    if (!model) model = await defaultModel(provider);
    if (!model) return refuse("model-policy-unenforceable", `no default model known for provider ${provider}`);
    const wanted = `${provider}/${model}`.toLowerCase();
    if (!allowed.has(wanted)) return refuse("model-not-allowed", `${wanted} is not in PI_ALLOWED_MODELS`);
  }

  let prompt;
  try {
    prompt = fs.readFileSync(PROMPT_FILE, "utf8");
  } catch (err) {
    return fail("prompt", `cannot read ${PROMPT_FILE}: ${err.code ?? err}`);
  }
  if (!prompt.trim()) return fail("prompt", `${PROMPT_FILE} is empty`);

  const home = usableHome();
  if (!home) return fail("home", "no writable HOME (tried $HOME and /tmp)");
  if (process.env.PI_MODEL_BASE_URL) {
    const err = writeBaseUrl(home, provider, process.env.PI_MODEL_BASE_URL.trim());
    if (err) return refuse("config", err);
  }

  const args = ["--mode", "json", "-p", "--no-session", "--provider", provider, "-e", GATE];
  if (model) args.push("--model", model);
  const excluded = new Set(listEnv("PI_EXCLUDE_TOOLS").map((t) => t.toLowerCase()));
  if (excluded.size) {
    const tools = DEFAULT_TOOLS.filter((t) => !excluded.has(t));
    if (tools.length) args.push("--tools", tools.join(","));
    else args.push("--no-tools");
  }

  const limits = { maxTurns: maxTurns.value, maxTokens: maxTokens.value, maxCostMicros: maxCost.value, allowed };
  emit({ event: "start", provider, model: model ?? "(pi default)", maxTurns: limits.maxTurns });

  const env = { ...process.env, HOME: home, PI_OFFLINE: process.env.PI_OFFLINE || "1" };
  child = spawn(PI_BIN, args, { cwd: process.cwd(), env, stdio: ["pipe", "pipe", "pipe"], detached: true });

  let spawnError = null;
  child.on("error", (err) => {
    spawnError = err;
  });
  // The prompt goes in on stdin: no argv length limit, and pi treats piped input as the first message.
  child.stdin.on("error", () => {});
  child.stdin.end(prompt);

  const stderrTail = [];
  const errLines = readline.createInterface({ input: child.stderr });
  errLines.on("line", (line) => {
    if (line.startsWith(GATE_MARK)) {
      let reason = null;
      try {
        reason = JSON.parse(line.slice(GATE_MARK.length)).reason;
      } catch {
        reason = null;
      }
      if (GATE_REASONS.has(reason)) {
        stopPi(reason, "stopped inside pi before the next provider request");
        return;
      }
    }
    const safe = redact(line);
    stderrTail.push(safe);
    if (stderrTail.length > 20) stderrTail.shift();
    process.stderr.write(`${safe}\n`);
  });
  const outLines = readline.createInterface({ input: child.stdout });
  outLines.on("line", (line) => {
    let ev;
    try {
      ev = JSON.parse(line);
    } catch {
      process.stderr.write(`${redact(line)}\n`);
      return;
    }
    if (ev && typeof ev === "object") onEvent(ev, limits);
  });

  for (const sig of ["SIGTERM", "SIGINT"]) {
    process.on(sig, () => stopPi("signal", `runner got ${sig}`));
  }

  const [code, signal] = await new Promise((resolve) => {
    child.on("close", (c, s) => resolve([c, s]));
  });
  if (killTimer) clearTimeout(killTimer);

  if (spawnError) return fail("pi", `cannot start pi: ${spawnError.code ?? spawnError.message}`);
  if (state.stop) {
    const { reason } = state.stop;
    if (reason === "signal") return finish(1);
    // cost-cap and model-not-allowed are labelled reasons; max-turns/max-tokens read as runner-policy.
    return finish(2, reason);
  }
  const last = state.lastAssistant;
  if (last?.stopReason === "error") {
    const text = `${last.errorMessage ?? ""}`;
    if (AUTH_REFUSED.test(text)) return finish(2, "provider-auth-refused");
    return finish(1);
  }
  if (code !== 0 || signal) {
    const tail = stderrTail.join(" ");
    emit({ event: "error", what: "pi", detail: short(`pi exited ${signal ?? code}: ${tail}`) });
    return finish(1);
  }
  if (last?.stopReason === "aborted") return finish(1);
  return finish(0);
}

main().catch((err) => {
  fail("runner", err?.stack ?? String(err));
});
