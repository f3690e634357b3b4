// Lua scripts and SQL migrations are imported as text so `bun build --compile` embeds them in the binary.
declare module "*.lua" {
  const source: string;
  export default source;
}
declare module "*.sql" {
  const source: string;
  export default source;
}
declare module "*.wasm" {
  const path: string;
  export default path;
}
declare module "*.data" {
  const path: string;
  export default path;
}
// The docs UI's files, embedded in the binary (imported `with { type: "file" }`: the value is a path).
declare module "swagger-ui-dist/swagger-ui-bundle.js" {
  const path: string;
  export default path;
}
declare module "swagger-ui-dist/swagger-ui.css" {
  const path: string;
  export default path;
}
