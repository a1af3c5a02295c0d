// A pi extension the runner loads with `-e`: the job's limits enforced inside pi, right before each
// provider request. The runner reads pi's event stream too, but pi sends the next request within
// milliseconds of a turn's end, faster than any signal from outside; only this hook stops a request
// beyond a limit from being sent at all.
//
// On a limit it writes one marker line to stderr, which the runner turns into the exit reason, and exits.
// Accounting matches runner.mjs: a turn is an assistant message that is not an error (pi's automatic
// retries after a failed request are not turns), tokens are pi's totalTokens, cost is usage.cost.total.

const MARK = "pi-dispatch-gate:";
const EXIT_CODE = 86;

function limit(name) {
  const raw = (process.env[name] ?? "").trim();
  return /^\d+$/.test(raw) ? Number(raw) : null;
}

export default function gate(pi) {
  const maxTurns = limit("PI_MAX_TURNS");
  const maxTokens = limit("PI_MAX_TOKENS");
  const maxCostMicros = limit("PI_MAX_COST_MICROS");
  let turns = 0;
  let tokens = 0;
  let cost = 0;

  pi.on("message_end", async (event) => {
    if (event.message?.role !== "assistant") return;
    if (event.message.stopReason !== "error") turns += 1;
    const usage = event.message.usage;
    if (!usage) return;
    const n = (v) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : 0);
    tokens += n(usage.totalTokens) || n(usage.input) + n(usage.output) + n(usage.cacheRead) + n(usage.cacheWrite);
    cost += n(usage.cost?.total);
  });

  pi.on("before_provider_request", async () => {
    let reason = null;
    if (maxTurns !== null && turns >= maxTurns) reason = "max-turns";
    else if (maxCostMicros !== null && Math.round(cost * 1e6) > maxCostMicros) reason = "cost-cap";
    else if (maxTokens !== null && tokens > maxTokens) reason = "max-tokens";
    if (reason) {
      process.stderr.write(`${MARK}${JSON.stringify({ reason, turns, tokens, cost })}\n`);
      process.exit(EXIT_CODE);
    }
    return undefined;
  });
}
