// `prisma generate` never runs the native schema engine, but the CLI tries to download it first;
// that host is unreachable offline. Pointing PRISMA_SCHEMA_ENGINE_BINARY at any existing file skips
// the download. A real engine set by the caller wins.
const { execFileSync } = require('node:child_process');
const env = { ...process.env };
if (!env.PRISMA_SCHEMA_ENGINE_BINARY) env.PRISMA_SCHEMA_ENGINE_BINARY = process.execPath;
env.PRISMA_HIDE_UPDATE_MESSAGE = '1';
execFileSync(process.platform === 'win32' ? 'npx.cmd' : 'npx', ['prisma', 'generate'], { stdio: 'inherit', env });
