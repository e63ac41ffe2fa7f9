"""The handlers ask Jupyter Server's authorizer: running a simulation needs the permission to run
code (``execute`` on ``kernels``), analyze and fix only ``read``."""

import pytest
from jupyter_server.auth.authorizer import Authorizer

from .conftest import example


class ReadOnlyAuthorizer(Authorizer):
    """A user who may read but not run code, like a viewer of a shared server."""

    def is_authorized(self, handler, user, action, resource):
        return action == "read"


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"npu_migrate_nb": True}, "authorizer_class": ReadOnlyAuthorizer}}


async def test_a_user_who_may_not_run_code_may_analyze_and_fix_but_not_simulate(post, jp_serverapp):
    assert isinstance(jp_serverapp.authorizer, ReadOnlyAuthorizer)
    notebook = example("keras_single_card.ipynb")
    assert (await post("analyze", {"notebook": notebook})).code == 200
    assert (await post("fix", {"notebook": notebook})).code == 200
    response = await post("simulate", {"notebook": notebook, "path": "keras.ipynb"})
    assert response.code == 403
    assert not jp_serverapp.web_app.settings["npu_migrate_jobs"].jobs
