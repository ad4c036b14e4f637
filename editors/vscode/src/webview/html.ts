/**
 * The chat page's HTML, with a strict Content Security Policy: no inline script or style, no
 * remote anything; only our own bundled script (by nonce) and stylesheet (by the webview's
 * resource origin). Model output is inserted as sanitised markup, so even a missed tag could
 * not run.
 */

export interface PageResources {
  /** The webview's `cspSource` (the origin its local resources are served from). */
  cspSource: string;
  nonce: string;
  scriptUri: string;
  styleUri: string;
}

export function randomNonce(): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  let nonce = '';
  for (let i = 0; i < 32; i++) nonce += alphabet[Math.floor(Math.random() * alphabet.length)];
  return nonce;
}

function attr(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');
}

export function chatHtml(r: PageResources): string {
  const csp = [
    "default-src 'none'",
    `img-src ${r.cspSource} data:`,
    `style-src ${r.cspSource}`,
    `font-src ${r.cspSource}`,
    `script-src 'nonce-${r.nonce}'`,
  ].join('; ');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${attr(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${attr(r.styleUri)}">
<title>sidechat</title>
</head>
<body>
<div id="app"></div>
<script nonce="${attr(r.nonce)}" src="${attr(r.scriptUri)}"></script>
</body>
</html>`;
}
