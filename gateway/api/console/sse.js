// Server-Sent Events read from a fetch() body (EventSource cannot send the credential header).
// Yields {event, data, id} for each dispatched event, as the WHATWG event-stream parser does.

export async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let event = 'message';
  let data = [];
  let id = null;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      for (;;) {
        const end = buffer.search(/\r\n|\r|\n/);
        if (end < 0) break;
        if (buffer[end] === '\r' && end + 1 === buffer.length) break; // a CR whose LF may be in the next chunk
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + (buffer[end] === '\r' && buffer[end + 1] === '\n' ? 2 : 1));
        if (line === '') {
          if (data.length) yield { event, data: data.join('\n'), id };
          event = 'message';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? '' : line.slice(colon + 1);
        if (text.startsWith(' ')) text = text.slice(1);
        if (name === 'data') data.push(text);
        else if (name === 'event') event = text;
        else if (name === 'id') id = text;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
