import { dashboardBundle } from "./bundle.macro.ts" with { type: "macro" };

/** The built dashboard, inlined here at transpile time; imported lazily, so only a request for the page pays for it. */
export const bundle = dashboardBundle();
