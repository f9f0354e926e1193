"""Creates a container in Azurite (the tests' Azure emulator): a Shared Key signed
`Create Container` request with the emulator's well-known account, so the tests need
no Azure SDK. Usage: azurite_container.py ENDPOINT CONTAINER"""
import base64
import hashlib
import hmac
import sys
import urllib.request
from email.utils import formatdate

endpoint, container = sys.argv[1], sys.argv[2]
account = "devstoreaccount1"
# Azurite's published development key (not a secret).
key = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
date, version, kind = formatdate(usegmt=True), "2021-10-04", "application/octet-stream"
signed = "\n".join(
    ["PUT", "", "", "", "", kind, "", "", "", "", "", ""]
    + [f"x-ms-date:{date}", f"x-ms-version:{version}"]
    + [f"/{account}/{account}/{container}", "restype:container"]
)
signature = base64.b64encode(hmac.new(key, signed.encode(), hashlib.sha256).digest()).decode()
request = urllib.request.Request(
    f"{endpoint}/{account}/{container}?restype=container",
    method="PUT",
    data=b"",
    headers={
        "Content-Type": kind,
        "x-ms-date": date,
        "x-ms-version": version,
        "Authorization": f"SharedKey {account}:{signature}",
    },
)
urllib.request.urlopen(request)
