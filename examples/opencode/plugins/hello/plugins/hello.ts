// A verified OpenCode plugin module: pitcrew links it into the config dir it pins for OpenCode
// after its tree hash verified. Its hook notes each tool call in the workspace's tool-calls.log.
import { appendFileSync } from "fs";

export const Hello = async ({ directory }) => ({
  "tool.execute.before": async (input) => {
    appendFileSync(`${directory}/tool-calls.log`, `${input.tool}\n`);
  },
});
