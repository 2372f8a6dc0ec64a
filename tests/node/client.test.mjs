// A Node.js client of txd, written as another language's user would: the .proto files loaded
// at run time with @grpc/proto-loader, calls made with @grpc/grpc-js over the daemon's Unix
// socket. Run by tests/integration/test_node_client.py against a real daemon:
//   TXD_SOCKET        the daemon's socket
//   TXD_PROTO_ROOT    proto/ (holds txd/v1/*.proto)
//   TXD_GOOGLE_PROTOS a folder holding google/rpc/status.proto and error_details.proto
//   TXD_PYTHON        a Python interpreter for the job to run
//   TXD_WORKDIR       the job's working directory
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import path from 'node:path';

import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';

function env(name) {
  const value = process.env[name];
  assert.ok(value, `${name} must be set`);
  return value;
}

const SOCKET = env('TXD_SOCKET');
const PROTO_ROOT = env('TXD_PROTO_ROOT');
const GOOGLE_PROTOS = env('TXD_GOOGLE_PROTOS');
const PYTHON = env('TXD_PYTHON');
const WORKDIR = env('TXD_WORKDIR');
const DEADLINE_MS = 60_000;

const definition = protoLoader.loadSync('txd/v1/runner.proto', {
  includeDirs: [PROTO_ROOT],
  keepCase: true, // field names as in the .proto: app_handle, num_replicas
  enums: String, // states by name: "SUCCEEDED"
  longs: String,
  defaults: true,
  oneofs: true,
});
const { Runner } = grpc.loadPackageDefinition(definition).txd.v1;

// google.rpc.Status and BadRequest, to read the details of an error.
const rpcRoot = new protobuf.Root();
rpcRoot.resolvePath = (_origin, target) =>
  path.isAbsolute(target) ? target : path.join(GOOGLE_PROTOS, target);
rpcRoot.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto']);
const Status = rpcRoot.lookupType('google.rpc.Status');
const BadRequest = rpcRoot.lookupType('google.rpc.BadRequest');

// Bytes a program may write that a text-minded pipeline would mangle: not UTF-8, a NUL, a
// carriage-return progress bar, a line far longer than any buffer, no final newline.
const HEAD = Buffer.from([0xff, 0xfe, 0x00, 0x41, 0x0a, 0xc3, 0x28, 0x0a]);
const LONG_LINE = 200_000;
const TAIL = Buffer.from('10%\r50%\r100%\ndone without newline', 'latin1');
const EXPECTED = Buffer.concat([HEAD, Buffer.alloc(LONG_LINE, 'L'), Buffer.from('\n'), TAIL]);
const WRITER =
  'import sys; h, n, t = sys.argv[1:]; ' +
  "sys.stdout.buffer.write(bytes.fromhex(h) + b'L' * int(n) + b'\\n' + bytes.fromhex(t))";

const ORDER = ['UNSUBMITTED', 'SUBMITTED', 'PENDING', 'RUNNING', 'SUCCEEDED'];

let client;

before(() => {
  client = new Runner(`unix://${SOCKET}`, grpc.credentials.createInsecure());
});

after(() => client.close());

function deadline() {
  return { deadline: Date.now() + DEADLINE_MS };
}

function unary(method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, deadline(), (err, response) => (err ? reject(err) : resolve(response)));
  });
}

function collect(call) {
  return new Promise((resolve, reject) => {
    const items = [];
    call.on('data', (item) => items.push(item));
    call.on('error', reject);
    call.on('end', () => resolve(items));
  });
}

function app(role) {
  return { name: 'node', roles: [{ name: 'writer', entrypoint: PYTHON, ...role }] };
}

test('run a job, watch it to the end, and read its log bytes exactly', async () => {
  const run = await unary('Run', {
    app: app({ args: ['-c', WRITER, HEAD.toString('hex'), String(LONG_LINE), TAIL.toString('hex')] }),
    cwd: WORKDIR,
  });
  assert.match(run.app_handle, /^local_cwd:\/\/.+\/.+$/);
  assert.ok(run.app_handle.endsWith(`/${run.app_id}`));

  const statuses = await collect(client.Watch({ app_handle: run.app_handle }, deadline()));
  const states = statuses.map((response) => response.status.state);
  assert.ok(states.length >= 1);
  assert.equal(states.at(-1), 'SUCCEEDED', `states: ${states}`);
  const ranks = states.map((state) => ORDER.indexOf(state));
  assert.ok(!ranks.includes(-1), `unexpected state in ${states}`);
  assert.deepEqual(ranks, [...ranks].sort((a, b) => a - b), `out of order: ${states}`);
  const last = statuses.at(-1).status;
  assert.equal(last.app_handle, run.app_handle);
  assert.equal(last.roles[0].replicas[0].exit_code, 0);

  const chunks = await collect(
    client.Logs({ app_handle: run.app_handle, follow: true, streams: 'STDOUT' }, deadline()),
  );
  assert.ok(chunks.every((chunk) => chunk.role === 'writer' && chunk.replica === 0));
  const data = Buffer.concat(chunks.map((chunk) => chunk.data));
  assert.equal(data.length, EXPECTED.length);
  assert.ok(data.equals(EXPECTED), 'the log bytes differ from what the job wrote');
});

test('an invalid Run is INVALID_ARGUMENT with the field path in google.rpc.BadRequest', async () => {
  const err = await unary('Run', { app: app({ num_replicas: 0 }), cwd: WORKDIR }).then(
    () => assert.fail('Run accepted num_replicas = 0'),
    (e) => e,
  );
  assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
  assert.equal(err.code, 3);
  assert.equal(err.details, 'app.roles[0].num_replicas: must be >= 1, got 0');

  const [raw] = err.metadata.get('grpc-status-details-bin');
  assert.ok(Buffer.isBuffer(raw), 'no grpc-status-details-bin trailer');
  const status = Status.decode(raw);
  assert.equal(status.code, 3);
  assert.equal(status.message, err.details);
  assert.equal(status.details.length, 1);
  assert.equal(status.details[0].type_url, 'type.googleapis.com/google.rpc.BadRequest');
  const bad = BadRequest.decode(status.details[0].value);
  assert.deepEqual(
    bad.fieldViolations.map((v) => [v.field, v.description]),
    [['app.roles[0].num_replicas', 'must be >= 1, got 0']],
  );
});

test('Watch at the watch door beside the socket: the same statuses and errors', async () => {
  const door = new Runner(`unix://${SOCKET}.watch`, grpc.credentials.createInsecure());
  try {
    const run = await unary('Run', { app: app({ args: ['-c', 'print("hi")'] }), cwd: WORKDIR });
    const live = await collect(door.Watch({ app_handle: run.app_handle }, deadline()));
    assert.equal(live.at(-1).status.state, 'SUCCEEDED');
    // The job has ended: one status each, the same.
    const atDoor = await collect(door.Watch({ app_handle: run.app_handle }, deadline()));
    const atSocket = await collect(client.Watch({ app_handle: run.app_handle }, deadline()));
    assert.equal(atDoor.length, 1);
    assert.deepEqual(atDoor, atSocket);
    assert.deepEqual(live.at(-1), atDoor[0]);

    const failed = (c) =>
      collect(c.Watch({ app_handle: `${run.app_handle}-nosuch` }, deadline())).then(
        () => assert.fail('a Watch of no job ended OK'),
        (e) => e,
      );
    const [doorErr, socketErr] = [await failed(door), await failed(client)];
    assert.equal(doorErr.code, grpc.status.NOT_FOUND);
    assert.equal(doorErr.details, socketErr.details);
    assert.match(doorErr.details, /^no job /);
  } finally {
    door.close();
  }
});
