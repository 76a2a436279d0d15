// Markdown for message bodies, rendered safely.
//
// Bodies are written by agents and may hold anything, HTML and script
// included, so this renderer never parses HTML and never sets innerHTML:
// it reads the text line by line and builds elements with
// document.createElement, putting every piece of text in with text nodes.
// It knows a small subset, the one agents write: paragraphs, headings,
// fenced code blocks, bullet and numbered lists, block quotes, and inline
// `code`, **strong**, *emphasis* and [links](https://...). A link is made
// only for an http: or https: URL (checked with the URL parser, so
// `javascript:` and friends stay text) and opens in a new tab with
// rel="noopener noreferrer". Everything else shows as the text it is.

/** Renders `text` as Markdown into a new element. */
export function renderMarkdown(text) {
  const root = document.createElement("div");
  root.className = "md";
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (/^\s*$/.test(line)) {
      i += 1;
    } else if (/^\s*```/.test(line)) {
      i = codeBlock(root, lines, i);
    } else if (/^#{1,6}\s/.test(line)) {
      const level = line.match(/^#+/)[0].length;
      const h = document.createElement(`h${Math.min(level + 2, 6)}`);
      inline(h, line.replace(/^#+\s*/, ""));
      root.append(h);
      i += 1;
    } else if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      i = list(root, lines, i);
    } else if (/^\s*>/.test(line)) {
      const quote = document.createElement("blockquote");
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) {
        body.push(lines[i].replace(/^\s*>\s?/, ""));
        i += 1;
      }
      quote.append(renderMarkdown(body.join("\n")));
      root.append(quote);
    } else {
      i = paragraph(root, lines, i);
    }
  }
  return root;
}

function codeBlock(root, lines, start) {
  const pre = document.createElement("pre");
  const code = document.createElement("code");
  const body = [];
  let i = start + 1;
  while (i < lines.length && !/^\s*```/.test(lines[i])) {
    body.push(lines[i]);
    i += 1;
  }
  code.textContent = body.join("\n");
  pre.append(code);
  root.append(pre);
  return i + 1;
}

function list(root, lines, start) {
  const ordered = /^\s*\d+[.)]\s/.test(lines[start]);
  const element = document.createElement(ordered ? "ol" : "ul");
  let i = start;
  while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
    const item = document.createElement("li");
    inline(item, lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ""));
    element.append(item);
    i += 1;
  }
  root.append(element);
  return i;
}

function paragraph(root, lines, start) {
  const p = document.createElement("p");
  const body = [];
  let i = start;
  while (
    i < lines.length &&
    !/^\s*$/.test(lines[i]) &&
    !/^\s*(```|#{1,6}\s|[-*+]\s|\d+[.)]\s|>)/.test(lines[i])
  ) {
    body.push(lines[i]);
    i += 1;
  }
  inline(p, body.join("\n"));
  root.append(p);
  return i;
}

// Inline spans, leftmost first: `code`, [text](url), **strong**, *em*.
const INLINE = /`([^`]+)`|\[([^\]]+)\]\(([^)\s]+)\)|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_/;

/** Appends `text` to `parent`, with the inline spans as elements. */
export function inline(parent, text) {
  let rest = String(text);
  while (rest.length > 0) {
    const match = INLINE.exec(rest);
    if (!match) {
      parent.append(document.createTextNode(rest));
      return;
    }
    if (match.index > 0) {
      parent.append(document.createTextNode(rest.slice(0, match.index)));
    }
    parent.append(span(match));
    rest = rest.slice(match.index + match[0].length);
  }
}

function span(match) {
  const [whole, code, label, url, strong, em, em2] = match;
  if (code !== undefined) {
    const element = document.createElement("code");
    element.textContent = code;
    return element;
  }
  if (label !== undefined) {
    return link(label, url) ?? document.createTextNode(whole);
  }
  const element = document.createElement(strong !== undefined ? "strong" : "em");
  element.textContent = strong ?? em ?? em2;
  return element;
}

/** A link to `url` if it is http(s), else null (shown as text). */
export function link(label, url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    return null;
  }
  const a = document.createElement("a");
  a.href = parsed.href;
  a.textContent = label;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  return a;
}
