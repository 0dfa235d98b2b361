// Copied next to the README's blocks: the defaults the README lists are the library's.
import assert from 'node:assert/strict';
import { DEFAULT_HANDLER_OPTIONS } from '@pg-queue/nestjs';
import { handlerDefaults } from './handler-options';

assert.deepEqual(handlerDefaults, DEFAULT_HANDLER_OPTIONS);
console.log(`RESULT ${JSON.stringify({ handlerDefaults: 'match' })}`);
