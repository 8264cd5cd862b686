"""lorarl prepare: download one https:// file or s3:// object (or prefix) into a directory.

Usage: python3 fetch.py URI DIR. prepare.sh calls it for inputs given as spec.*.uri and owns
the rest (the lock, the marker, the rename of DIR@partial). Secrets come from the environment
only (the Secret, through secretKeyRef) and are never printed:
- https: LORARL_HTTP_TOKEN, sent as "Authorization: Bearer" (urllib, the standard library);
- s3: botocore (the AWS SDK's core: SigV4 signing, regions, retries), which reads
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION and AWS_ENDPOINT_URL itself.
  botocore is not in every image: without it an s3:// input fails naming spec.dataPrep.image.
A file is written to DIR/<name>.part and renamed, so a complete name is a complete file.
"""

import os
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request


def fail(message, code=4):
    print(f"fetch.py: {message}", file=sys.stderr)
    sys.exit(code)


def write(stream, target):
    part = target + ".part"
    with open(part, "wb") as out:
        shutil.copyfileobj(stream, out, 1 << 20)
    os.replace(part, target)


def fetch_https(uri, directory):
    request = urllib.request.Request(uri)
    token = os.environ.get("LORARL_HTTP_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    name = os.path.basename(urllib.parse.urlsplit(uri).path)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            write(response, os.path.join(directory, name))
    except urllib.error.HTTPError as err:
        hint = " (spec.dataPrep.httpTokenSecretRef)" if err.code in (401, 403) else ""
        fail(f"{uri}: HTTP {err.code} {err.reason}{hint}")
    except (urllib.error.URLError, OSError) as err:
        fail(f"{uri}: {err}")


def fetch_s3(uri, directory):
    try:
        import botocore.exceptions
        import botocore.session
    except ImportError:
        fail("s3:// inputs need botocore (the AWS SDK's core) in the prepare image: set spec.dataPrep.image to an image that has it", 2)
    bucket, _, key = uri[len("s3://") :].partition("/")
    client = botocore.session.get_session().create_client("s3")
    try:
        if not key.endswith("/"):  # one object
            body = client.get_object(Bucket=bucket, Key=key)["Body"]
            write(body, os.path.join(directory, os.path.basename(key)))
            return
        found = 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
            for item in page.get("Contents", []):
                relative = item["Key"][len(key) :]
                if not relative or relative.endswith("/"):
                    continue  # "directory" placeholder objects
                if any(part in ("", ".", "..") for part in relative.split("/")):
                    fail(f"{uri}: object {item['Key']!r} would be written outside {directory}")
                target = os.path.join(directory, relative)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                write(client.get_object(Bucket=bucket, Key=item["Key"])["Body"], target)
                found += 1
        if not found:
            fail(f"{uri}: no object under this prefix")
    except botocore.exceptions.ClientError as err:
        error = err.response.get("Error", {})
        hint = (
            " (credentials: spec.dataPrep.s3.credentialsSecretName)"
            if error.get("Code") in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch")
            else ""
        )
        fail(f"{uri}: {error.get('Code', 'error')}: {error.get('Message', err)}{hint}")
    except botocore.exceptions.BotoCoreError as err:
        fail(f"{uri}: {err}")


def main(argv):
    if len(argv) != 3:
        fail("usage: fetch.py URI DIR", 2)
    uri, directory = argv[1], argv[2]
    os.makedirs(directory, exist_ok=True)
    if uri.startswith("https://"):
        fetch_https(uri, directory)
    elif uri.startswith("s3://"):
        fetch_s3(uri, directory)
    else:
        fail(f"{uri}: only https:// and s3:// are fetched", 2)


if __name__ == "__main__":
    main(sys.argv)
