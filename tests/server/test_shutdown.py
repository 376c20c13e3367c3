"""A server stopped while it lists a job's source exits cleanly: every job
is freed, also one whose last reference is the lister's, dropped after the
thread that frees jobs has ended (under the sanitizer build a leak fails
the exit status). Regression: a job PUT just before SIGTERM leaked with
its spec and shard list."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from server_testlib import request

ADMIN = "shutdown-admin"
STALL_S = 1.0  # the listing's answer: after the stop began, well within
# the server's wait for its threads (5 s)
EMPTY = (b'<?xml version="1.0" encoding="UTF-8"?>'
         b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
         b'<Name>b</Name><Prefix>p/</Prefix><KeyCount>0</KeyCount>'
         b'<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>'
         b'</ListBucketResult>')


class _SlowList(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    asked = None  # set when the first request came

    def do_GET(self):
        _SlowList.asked.set()
        time.sleep(STALL_S)
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(EMPTY)))
        self.end_headers()
        self.wfile.write(EMPTY)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def test_a_job_put_while_its_listing_runs_is_freed_at_the_stop(start, small_ds):
    _SlowList.asked = threading.Event()
    store = ThreadingHTTPServer(("127.0.0.1", 0), _SlowList)
    t = threading.Thread(target=store.serve_forever, daemon=True)
    t.start()
    try:
        env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_REGION": "us-east-1",
               "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:%d" % store.server_address[1]}
        srv = start("--job", "train", "--source", small_ds.path, "--admin-token", ADMIN,
                    env=env)
        st, _, body = request(srv, "/v1/jobs/slow", method="PUT", token=ADMIN,
                              body=json.dumps({"source": "s3://b/p/"}).encode(),
                              headers={"Content-Type": "application/json"})
        assert st in (200, 201), (st, body)
        # The resolver is inside the listing: stop now.
        assert _SlowList.asked.wait(30)
        rc = srv.stop()
        assert rc == 0, srv.log()
        assert "event=stopped" in srv.log()
    finally:
        store.shutdown()
        store.server_close()
