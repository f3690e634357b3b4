// One rule, type-aware: a promise nobody awaits, catches or marks `void` (a settle or a write whose failure would
// go unseen). Formatting is Prettier's and the types are tsc's; `bun run lint` runs this, `bun run check` all three.
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["**/*", "!src/**", "!test/**", "!bench/**", "!scripts/**", "!examples/**", "!**/*.ts", "test/artifacts/**"] },
  {
    files: ["**/*.ts"],
    languageOptions: { parser: tseslint.parser, parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { "@typescript-eslint": tseslint.plugin },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: { "@typescript-eslint/no-floating-promises": "error" },
  },
);
