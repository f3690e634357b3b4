/**
 * Environment references in the catalog file's `baseUrl`s: `${NAME}` and `${NAME:-default}` (shell meaning: the
 * default when NAME is unset or empty). They let one variable move a local model server (the echo model's
 * `ECHO_PORT`) without a second copy of the catalog. A `$` not followed by `{` is kept as written.
 */

/** A reference that cannot be resolved; the catalog names the field it is in. */
export class EnvRefError extends Error {}

const REF = /\$\{([^}]*)\}/g;
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * `text` with its references replaced from `env`. A reference without a default whose variable is unset is an
 * error naming the variable, so start-up stops with one line instead of calling a wrong URL.
 */
export function expandEnvRefs(text: string, env: Record<string, string | undefined>): string {
  if (/\$\{[^}]*$/.test(text)) throw new EnvRefError(`has an unclosed "\${" (write \${NAME} or \${NAME:-default})`);
  return text.replace(REF, (_ref, inner: string) => {
    const sep = inner.indexOf(":-");
    const name = sep < 0 ? inner : inner.slice(0, sep);
    if (!NAME.test(name))
      throw new EnvRefError(`has "\${${inner}}", which is not a variable reference (write \${NAME} or \${NAME:-default})`);
    const value = env[name];
    if (sep >= 0) return value ? value : inner.slice(sep + 2);
    if (value === undefined) throw new EnvRefError(`needs ${name}, which is not set (set it, or give a default: \${${name}:-…})`);
    return value;
  });
}
