/**
 * Incremental Server-Sent-Events decoder: feed it bytes as they arrive, get whole `data` payloads back.
 * Handles LF and CRLF, multi-line data fields, comments and events split across network reads.
 */
export class SseDecoder {
  private readonly text = new TextDecoder();
  private buffer = "";
  private data: string[] = [];

  push(bytes: Uint8Array): string[] {
    this.buffer += this.text.decode(bytes, { stream: true });
    const out: string[] = [];
    let start = 0;
    for (let nl = this.buffer.indexOf("\n"); nl !== -1; nl = this.buffer.indexOf("\n", start)) {
      let line = this.buffer.slice(start, nl);
      start = nl + 1;
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (this.data.length > 0) out.push(this.data.join("\n"));
        this.data = [];
      } else if (line.startsWith("data:")) {
        this.data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
      }
      // event:, id:, retry: and ":" comments carry nothing the gateway needs.
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  /** A final event not followed by a blank line (a server that closed right after it). */
  end(): string[] {
    const rest = this.push(new TextEncoder().encode("\n\n"));
    return rest;
  }
}
