// A pi extension: one tool, `hello_tool`, that greets someone. pitcrew verifies this directory's
// tree hash before every iteration and loads it with `-e` (pi runs with --no-extensions, so
// nothing else is loaded).
import { Type } from "@mariozechner/pi-ai";
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";

export default function (pi: ExtensionAPI) {
	pi.registerTool({
		name: "hello_tool",
		label: "Hello",
		description: "Greets someone",
		parameters: Type.Object({ name: Type.String({ description: "Name to greet" }) }),
		async execute(_toolCallId, params) {
			return { content: [{ type: "text", text: `Hello, ${params.name}!` }], details: {} };
		},
	});
}
