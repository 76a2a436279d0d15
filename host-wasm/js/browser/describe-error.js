// What the page and its OPFS worker share: a thrown value as plain data that
// survives postMessage and JSON (an InboxError keeps code, exitCode, ...).

export function describeError(error) {
  if (error === null || typeof error !== 'object') return { name: typeof error, message: String(error) };
  return {
    name: error.name,
    message: error.message,
    code: error.code,
    exitCode: error.exitCode,
    command: error.command,
    responseCode: error.response?.error?.code,
    isError: error instanceof Error,
  };
}
