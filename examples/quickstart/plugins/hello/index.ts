// A minimal pi extension: registers one flag and one tool. pitcrew never imports it on the
// host; `pitcrew classify` finds `index.ts` by pi's own directory rule and the flag by a static
// scan.
export default function (pi: any) {
  pi.registerFlag("greeting", { type: "string", default: "Hello" });
  pi.registerTool({
    name: "hello_tool",
    description: "Say hello",
    parameters: { type: "object", properties: {} },
    async execute() {
      return { content: [{ type: "text", text: `${pi.getFlag("greeting")}, world` }] };
    },
  });
}
