# ruff: noqa: E501  (the documented payloads below are kept verbatim)
"""Payloads as the forges send them: the files under ``tests/fixtures/`` and documented samples kept here.

The fixtures hold no Azure DevOps work-item events, so the three work-item samples of Microsoft's
"Service hooks events" page (learn.microsoft.com/azure/devops/service-hooks/events) are kept here
verbatim as JSON text (``workitem.updated`` from the page's earlier revision: the current one shows a
``git.push`` body under that heading by mistake).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent.parent / "fixtures"


def load_fixture(relative: str) -> dict[str, Any]:
    return json.loads((FIXTURES / relative).read_text())


def fixture_bytes(relative: str) -> bytes:
    return (FIXTURES / relative).read_bytes()


def fixture_paths(folder: str) -> list[Path]:
    return sorted((FIXTURES / folder).glob("*.json"))


def octokit_examples() -> Iterator[tuple[str, bytes]]:
    """Every example of ``@octokit/webhooks-examples`` as (event name, body bytes as GitHub sends them)."""
    with gzip.open(FIXTURES / "github" / "webhooks-examples.json.gz") as f:
        groups = json.load(f)
    for group in groups:
        for example in group["examples"]:
            yield group["name"], json.dumps(example, indent=2).encode()


WORKITEM_CREATED = r"""{
  "id": "d2d46fb1-dba5-403c-9373-427583f19e8c",
  "eventType": "workitem.created",
  "publisherId": "tfs",
  "scope": "all",
  "message": {
    "text": "Bug #5 (Some great new idea!) created by Jamal Hartnett.\r\n(https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5)",
    "html": "<a href=\"https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&amp;id=5\">Bug #5</a> (Some great new idea!) created by Jamal Hartnett.",
    "markdown": "[Bug #5](https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5) (Some great new idea!) created by Jamal Hartnett."
  },
  "detailedMessage": {
    "text": "Bug #5 (Some great new idea!) created by Jamal Hartnett.\r\n(https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5)\r\n\r\n- Area: FabrikamCloud\r\n- Iteration: FabrikamCloud\\Release 1\\Sprint 1\r\n- State: New\r\n- Assigned to: \r\n- Comment: \r\n- Severity: 3 - Medium\r\n",
    "html": "<a href=\"https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&amp;id=5\">Bug #5</a> (Some great new idea!) created by Jamal Hartnett.<ul>\r\n<li>Area: FabrikamCloud</li>\r\n<li>Iteration: FabrikamCloud\\Release 1\\Sprint 1</li>\r\n<li>State: New</li>\r\n<li>Assigned to: </li>\r\n<li>Comment: </li>\r\n<li>Severity: 3 - Medium</li></ul>",
    "markdown": "[Bug #5](https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5) (Some great new idea!) created by Jamal Hartnett.\r\n\r\n* Area: FabrikamCloud\r\n* Iteration: FabrikamCloud\\Release 1\\Sprint 1\r\n* State: New\r\n* Assigned to: \r\n* Comment: \r\n* Severity: 3 - Medium\r\n"
  },
  "resource": {
    "id": 5,
    "rev": 1,
    "fields": {
      "System.AreaPath": "FabrikamCloud",
      "System.TeamProject": "FabrikamCloud",
      "System.IterationPath": "FabrikamCloud\\Release 1\\Sprint 1",
      "System.WorkItemType": "Bug",
      "System.State": "New",
      "System.Reason": "New defect reported",
      "System.CreatedDate": "2014-07-15T17:42:44.663Z",
      "System.CreatedBy": "Jamal Hartnett",
      "System.ChangedDate": "2014-07-15T17:42:44.663Z",
      "System.ChangedBy": "Jamal Hartnett",
      "System.Title": "Some great new idea!",
      "Microsoft.Azure DevOps Services.Common.Severity": "3 - Medium",
      "WEF_EB329F44FE5F4A94ACB1DA153FDF38BA_Kanban.Column": "New"
    },
    "_links": {
      "self": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5"},
      "workItemUpdates": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5/updates"},
      "workItemRevisions": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5/revisions"},
      "workItemType": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/ea830882-2a3c-4095-a53f-972f9a376f6e/workItemTypes/Bug"},
      "fields": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/fields"}
    },
    "url": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5"
  },
  "resourceVersion": "1.0",
  "resourceContainers": {
    "collection": {"id": "c12d0eb8-e382-443b-9f9c-c52cba5014c2"},
    "account": {"id": "f844ec47-a9db-4511-8281-8b63f4eaf94e"},
    "project": {"id": "be9b3917-87e6-42a4-a549-2bc06a7a878f"}
  },
  "createdDate": "2016-09-19T13:03:29.7688022Z"
}"""

WORKITEM_UPDATED = r"""{
  "id": "27646e0e-b520-4d2b-9411-bba7524947cd",
  "eventType": "workitem.updated",
  "publisherId": "tfs",
  "scope": "all",
  "message": {
    "text": "Bug #5 (Some great new idea!) updated by Jamal Hartnett.\r\n(https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5)",
    "html": "<a href=\"https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&amp;id=5\">Bug #5</a> (Some great new idea!) updated by Jamal Hartnett.",
    "markdown": "[Bug #5](https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5) (Some great new idea!) updated by Jamal Hartnett."
  },
  "detailedMessage": {
    "text": "Bug #5 (Some great new idea!) updated by Jamal Hartnett.\r\n(https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5)\r\n\r\n- New State: Approved\r\n",
    "html": "<a href=\"https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&amp;id=5\">Bug #5</a> (Some great new idea!) updated by Jamal Hartnett.<ul>\r\n<li>New State: Approved</li></ul>",
    "markdown": "[Bug #5](https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5) (Some great new idea!) updated by Jamal Hartnett.\r\n\r\n* New State: Approved\r\n"
  },
  "resource": {
    "id": 2,
    "workItemId": 0,
    "rev": 2,
    "revisedBy": null,
    "revisedDate": "0001-01-01T00:00:00",
    "fields": {
      "System.Rev": {"oldValue": "1", "newValue": "2"},
      "System.AuthorizedDate": {"oldValue": "2014-07-15T16:48:44.663Z", "newValue": "2014-07-15T17:42:44.663Z"},
      "System.RevisedDate": {"oldValue": "2014-07-15T17:42:44.663Z", "newValue": "9999-01-01T00:00:00Z"},
      "System.State": {"oldValue": "New", "newValue": "Approved"},
      "System.Reason": {"oldValue": "New defect reported", "newValue": "Approved by the Product Owner"},
      "System.AssignedTo": {"newValue": "Jamal Hartnet"},
      "System.ChangedDate": {"oldValue": "2014-07-15T16:48:44.663Z", "newValue": "2014-07-15T17:42:44.663Z"},
      "System.Watermark": {"oldValue": "2", "newValue": "5"},
      "Microsoft.Azure DevOps Services.Common.Severity": {"oldValue": "3 - Medium", "newValue": "2 - High"}
    },
    "_links": {
      "self": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5/updates/2"},
      "parent": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5"},
      "workItemUpdates": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5/updates"}
    },
    "url": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5/updates/2",
    "revision": {
      "id": 5,
      "rev": 2,
      "fields": {
        "System.AreaPath": "FabrikamCloud",
        "System.TeamProject": "FabrikamCloud",
        "System.IterationPath": "FabrikamCloud\\Release 1\\Sprint 1",
        "System.WorkItemType": "Bug",
        "System.State": "New",
        "System.Reason": "New defect reported",
        "System.CreatedDate": "2014-07-15T16:48:44.663Z",
        "System.CreatedBy": "Jamal Hartnett",
        "System.ChangedDate": "2014-07-15T16:48:44.663Z",
        "System.ChangedBy": "Jamal Hartnett",
        "System.Title": "Some great new idea!",
        "Microsoft.Azure DevOps Services.Common.Severity": "3 - Medium",
        "WEF_EB329F44FE5F4A94ACB1DA153FDF38BA_Kanban.Column": "New"
      },
      "url": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5/revisions/2"
    }
  },
  "resourceVersion": "1.0",
  "resourceContainers": {
    "collection": {"id": "c12d0eb8-e382-443b-9f9c-c52cba5014c2"},
    "account": {"id": "f844ec47-a9db-4511-8281-8b63f4eaf94e"},
    "project": {"id": "be9b3917-87e6-42a4-a549-2bc06a7a878f"}
  },
  "createdDate": "2016-09-19T13:03:30.6438544Z"
}"""

WORKITEM_COMMENTED = r"""{
  "id": "fb2617ed-60df-4518-81fa-749faa6c5cd6",
  "eventType": "workitem.commented",
  "publisherId": "tfs",
  "scope": "all",
  "message": {
    "text": "Bug #5 (Some great new idea!) commented on by Jamal Hartnett.\r\n(https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5)",
    "html": "<a href=\"https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&amp;id=5\">Bug #5</a> (Some great new idea!) commented on by Jamal Hartnett.",
    "markdown": "[Bug #5](https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5) (Some great new idea!) commented on by Jamal Hartnett."
  },
  "detailedMessage": {
    "text": "Bug #5 (Some great new idea!) commented on by Jamal Hartnett.\r\n(https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5)\r\nThis is a great new idea",
    "html": "<a href=\"https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&amp;id=5\">Bug #5</a> (Some great new idea!) commented on by Jamal Hartnett.<br/>This is a great new idea",
    "markdown": "[Bug #5](https://dev.azure.com/fabrikam-fiber-inc/web/wi.aspx?pcguid=74e918bf-3376-436d-bd20-8e8c1287f465&id=5) (Some great new idea!) commented on by Jamal Hartnett.\r\nThis is a great new idea"
  },
  "resource": {
    "id": 5,
    "rev": 4,
    "fields": {
      "System.AreaPath": "FabrikamCloud",
      "System.TeamProject": "FabrikamCloud",
      "System.IterationPath": "FabrikamCloud\\Release 1\\Sprint 1",
      "System.WorkItemType": "Bug",
      "System.State": "New",
      "System.Reason": "New defect reported",
      "System.CreatedDate": "2014-07-15T17:42:44.663Z",
      "System.CreatedBy": "Jamal Hartnett",
      "System.ChangedDate": "2014-07-15T17:42:44.663Z",
      "System.ChangedBy": "Jamal Hartnett",
      "System.Title": "Some great new idea!",
      "Microsoft.Azure DevOps Services.Common.Severity": "3 - Medium",
      "WEF_EB329F44FE5F4A94ACB1DA153FDF38BA_Kanban.Column": "New",
      "System.History": "This is a great new idea"
    },
    "_links": {
      "self": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5"},
      "workItemUpdates": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5/updates"},
      "workItemRevisions": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5/revisions"},
      "workItemType": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/ea830882-2a3c-4095-a53f-972f9a376f6e/workItemTypes/Bug"},
      "fields": {"href": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/fields"}
    },
    "url": "https://dev.azure.com/fabrikam-fiber-inc/DefaultCollection/_apis/wit/workItems/5"
  },
  "resourceVersion": "1.0",
  "resourceContainers": {
    "collection": {"id": "c12d0eb8-e382-443b-9f9c-c52cba5014c2"},
    "account": {"id": "f844ec47-a9db-4511-8281-8b63f4eaf94e"},
    "project": {"id": "be9b3917-87e6-42a4-a549-2bc06a7a878f"}
  },
  "createdDate": "2016-09-19T13:03:28.9695265Z"
}"""
