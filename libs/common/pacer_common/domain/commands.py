"""Item commands (Kafka ``pacer.item-commands``, key = guid): one send for a sender to execute."""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, overload

from pydantic import AwareDatetime, BaseModel, ConfigDict

from pacer_common.domain.ids import Guid, IdemKey, ItemId, JobId, ToId

SCHEMA_VERSION = 1
_enc = json.encoder.encode_basestring


class ItemCommand(BaseModel):
    """Everything a sender needs to execute one item without reading the job."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: int = SCHEMA_VERSION
    item_id: ItemId
    job_id: JobId
    shard_id: int
    guid: Guid
    to_id: ToId
    content: str
    idem_key: IdemKey
    priority: int
    kind: str
    expire_at: AwareDatetime | None = None
    not_before: AwareDatetime | None = None
    # When the planner stored the item (the start of its wait), and the W3C trace context
    # of the job request it belongs to. Absent from commands of older planners.
    created_at: AwareDatetime | None = None
    traceparent: str | None = None
    # The job's tenant: whose gateway (URL, credential, breaker) sends it.
    tenant: str = "default"

    def model_post_init(self, context: Any, /) -> None:
        """Share what this command has in common with others: pydantic's record of which
        fields were given, with every command given the same ones (a set of their names per
        instance was 730 bytes of the 1,500 a command cost); and the job's own strings —
        content, kind, tenant, trace context, the job id — with the job's other commands that
        carry equal ones (a refill's driver and the JSON parser make each a copy per command:
        a campaign's text, from a template of up to 4,096 characters, is held once per job,
        not once per item). A sender holds up to twice ``PACER_SENDER_MAX_BUFFERED`` commands. The model is frozen, so
        nothing changes what is shared (a copy gets a record of its own)."""
        given = self.__pydantic_fields_set__
        shared = _FIELD_SETS.get(frozenset(given))
        if shared is None and len(_FIELD_SETS) < _FIELD_SETS_MAX:
            shared = _FIELD_SETS[frozenset(given)] = set(given)
        if shared is not None:
            object.__setattr__(self, "__pydantic_fields_set__", shared)
        _share_job_strings(self.__dict__)


# The sets of given fields commands share: one per combination met (a handful in practice).
_FIELD_SETS: dict[frozenset[str], set[str]] = {}
_FIELD_SETS_MAX = 64

# A job's strings as its first command (since the table was last cleared) carried them,
# shared by its later commands where equal: a content rendered per target differs and is
# kept as given. Bounded: when full, the table starts afresh.
_JOB_STRINGS_FIELDS = ("job_id", "content", "kind", "tenant", "traceparent")
_job_strings = operator.itemgetter(*_JOB_STRINGS_FIELDS)
_JOB_STRINGS: dict[str, tuple[tuple[str | None, ...], dict[str, str | None]]] = {}
_JOB_STRINGS_MAX = 1024


def _share_job_strings(values: dict[str, Any]) -> None:
    mine = _job_strings(values)
    first = _JOB_STRINGS.get(mine[0])
    if first is None:
        if len(_JOB_STRINGS) >= _JOB_STRINGS_MAX:
            _JOB_STRINGS.clear()
        _JOB_STRINGS[mine[0]] = (mine, dict(zip(_JOB_STRINGS_FIELDS, mine, strict=True)))
    elif mine == first[0]:
        values.update(first[1])  # the usual case: all equal
    else:
        for field, value in first[1].items():
            if value is not None and values[field] == value:
                values[field] = value


class CommandHead(BaseModel):
    """The part of an item command that places it in its guid's queue — lane and priority,
    job (fair share), when it is due — read without the rest: what a sender needs of a
    doorbell it will not hold."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    guid: Guid
    job_id: JobId
    priority: int
    not_before: AwareDatetime | None = None
    item_id: ItemId | None = None  # which item rang: a refill that read it has caught up with it


ItemFields = tuple[ItemId, int, Guid, ToId, str, IdemKey]  # item_id, shard_id, guid, to_id, content, idem_key


class JobCommands(Sequence[ItemCommand]):
    """The item commands of one job, or of one page of it: the job's fields once, each item's
    own as a tuple. A sequence of :class:`ItemCommand` like any other; :meth:`encoded` gives
    their JSON without building a model per item, which a million-item job would feel."""

    def __init__(self, job_id: JobId, priority: int, kind: str, expire_at: datetime | None,
                 not_before: datetime | None, items: Sequence[ItemFields], created_at: datetime | None = None,
                 traceparent: str | None = None, tenant: str = "default") -> None:
        self.job_id, self.priority, self.kind, self.tenant = job_id, priority, kind, tenant
        self.expire_at, self.not_before = expire_at, not_before
        self.created_at, self.traceparent = created_at, traceparent
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, i: int) -> ItemCommand: ...
    @overload
    def __getitem__(self, i: slice) -> list[ItemCommand]: ...

    def __getitem__(self, i: int | slice) -> ItemCommand | list[ItemCommand]:
        if isinstance(i, slice):
            return [self._command(f) for f in self.items[i]]
        return self._command(self.items[i])

    def _command(self, f: ItemFields) -> ItemCommand:
        return ItemCommand(item_id=f[0], job_id=self.job_id, shard_id=f[1], guid=f[2], to_id=f[3], content=f[4],
                           idem_key=f[5], priority=self.priority, kind=self.kind, expire_at=self.expire_at,
                           not_before=self.not_before, created_at=self.created_at, traceparent=self.traceparent,
                           tenant=self.tenant)

    def encoded(self) -> Iterator[tuple[str, bytes]]:
        """``(guid, JSON)`` per item: byte for byte what ``model_dump_json()`` of its
        :class:`ItemCommand` gives. The fields after ``idem_key`` are the job's: pydantic
        encodes them once; each item's strings go through the json module's encoder."""
        proto = self._command((ItemId(""), 0, Guid(""), ToId(""), "", IdemKey(""))).model_dump_json()
        tail = proto[proto.index(',"priority":'):]
        job = _enc(self.job_id)
        for item_id, shard_id, guid, to_id, content, idem_key in self.items:
            yield guid, (f'{{"schema_version":{SCHEMA_VERSION},"item_id":{_enc(item_id)},"job_id":{job},'
                         f'"shard_id":{shard_id},"guid":{_enc(guid)},"to_id":{_enc(to_id)},'
                         f'"content":{_enc(content)},"idem_key":{_enc(idem_key)}{tail}').encode()
