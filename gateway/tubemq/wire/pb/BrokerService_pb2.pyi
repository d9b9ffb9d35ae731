from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AuthorizedInfo(_message.Message):
    __slots__ = ("visitAuthorizedToken", "authAuthorizedToken")
    VISITAUTHORIZEDTOKEN_FIELD_NUMBER: _ClassVar[int]
    AUTHAUTHORIZEDTOKEN_FIELD_NUMBER: _ClassVar[int]
    visitAuthorizedToken: int
    authAuthorizedToken: str
    def __init__(self, visitAuthorizedToken: _Optional[int] = ..., authAuthorizedToken: _Optional[str] = ...) -> None: ...

class SendMessageRequestP2B(_message.Message):
    __slots__ = ("clientId", "topicName", "partitionId", "data", "flag", "checkSum", "sentAddr", "msgType", "msgTime", "authInfo")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    TOPICNAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    SENTADDR_FIELD_NUMBER: _ClassVar[int]
    MSGTYPE_FIELD_NUMBER: _ClassVar[int]
    MSGTIME_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    topicName: str
    partitionId: int
    data: bytes
    flag: int
    checkSum: int
    sentAddr: int
    msgType: str
    msgTime: str
    authInfo: AuthorizedInfo
    def __init__(self, clientId: _Optional[str] = ..., topicName: _Optional[str] = ..., partitionId: _Optional[int] = ..., data: _Optional[bytes] = ..., flag: _Optional[int] = ..., checkSum: _Optional[int] = ..., sentAddr: _Optional[int] = ..., msgType: _Optional[str] = ..., msgTime: _Optional[str] = ..., authInfo: _Optional[_Union[AuthorizedInfo, _Mapping]] = ...) -> None: ...

class SendMessageResponseB2P(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "requireAuth", "messageId", "appendTime", "appendOffset")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    REQUIREAUTH_FIELD_NUMBER: _ClassVar[int]
    MESSAGEID_FIELD_NUMBER: _ClassVar[int]
    APPENDTIME_FIELD_NUMBER: _ClassVar[int]
    APPENDOFFSET_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    requireAuth: bool
    messageId: int
    appendTime: int
    appendOffset: int
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., requireAuth: _Optional[bool] = ..., messageId: _Optional[int] = ..., appendTime: _Optional[int] = ..., appendOffset: _Optional[int] = ...) -> None: ...

class RegisterRequestC2B(_message.Message):
    __slots__ = ("opType", "clientId", "groupName", "topicName", "partitionId", "readStatus", "filterCondStr", "currOffset", "sessionKey", "sessionTime", "ssdStoreId", "qryPriorityId", "authInfo")
    OPTYPE_FIELD_NUMBER: _ClassVar[int]
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    TOPICNAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONID_FIELD_NUMBER: _ClassVar[int]
    READSTATUS_FIELD_NUMBER: _ClassVar[int]
    FILTERCONDSTR_FIELD_NUMBER: _ClassVar[int]
    CURROFFSET_FIELD_NUMBER: _ClassVar[int]
    SESSIONKEY_FIELD_NUMBER: _ClassVar[int]
    SESSIONTIME_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    opType: int
    clientId: str
    groupName: str
    topicName: str
    partitionId: int
    readStatus: int
    filterCondStr: _containers.RepeatedScalarFieldContainer[str]
    currOffset: int
    sessionKey: str
    sessionTime: int
    ssdStoreId: int
    qryPriorityId: int
    authInfo: AuthorizedInfo
    def __init__(self, opType: _Optional[int] = ..., clientId: _Optional[str] = ..., groupName: _Optional[str] = ..., topicName: _Optional[str] = ..., partitionId: _Optional[int] = ..., readStatus: _Optional[int] = ..., filterCondStr: _Optional[_Iterable[str]] = ..., currOffset: _Optional[int] = ..., sessionKey: _Optional[str] = ..., sessionTime: _Optional[int] = ..., ssdStoreId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., authInfo: _Optional[_Union[AuthorizedInfo, _Mapping]] = ...) -> None: ...

class RegisterResponseB2C(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "currOffset", "maxOffset")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    CURROFFSET_FIELD_NUMBER: _ClassVar[int]
    MAXOFFSET_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    currOffset: int
    maxOffset: int
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., currOffset: _Optional[int] = ..., maxOffset: _Optional[int] = ...) -> None: ...

class HeartBeatRequestC2B(_message.Message):
    __slots__ = ("clientId", "groupName", "readStatus", "partitionInfo", "ssdStoreId", "qryPriorityId", "authInfo")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    READSTATUS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONINFO_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    groupName: str
    readStatus: int
    partitionInfo: _containers.RepeatedScalarFieldContainer[str]
    ssdStoreId: int
    qryPriorityId: int
    authInfo: AuthorizedInfo
    def __init__(self, clientId: _Optional[str] = ..., groupName: _Optional[str] = ..., readStatus: _Optional[int] = ..., partitionInfo: _Optional[_Iterable[str]] = ..., ssdStoreId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., authInfo: _Optional[_Union[AuthorizedInfo, _Mapping]] = ...) -> None: ...

class HeartBeatResponseB2C(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "hasPartFailure", "failureInfo", "requireAuth")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    HASPARTFAILURE_FIELD_NUMBER: _ClassVar[int]
    FAILUREINFO_FIELD_NUMBER: _ClassVar[int]
    REQUIREAUTH_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    hasPartFailure: bool
    failureInfo: _containers.RepeatedScalarFieldContainer[str]
    requireAuth: bool
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., hasPartFailure: _Optional[bool] = ..., failureInfo: _Optional[_Iterable[str]] = ..., requireAuth: _Optional[bool] = ...) -> None: ...

class GetMessageRequestC2B(_message.Message):
    __slots__ = ("clientId", "partitionId", "groupName", "topicName", "lastPackConsumed", "manualCommitOffset", "escFlowCtrl")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    TOPICNAME_FIELD_NUMBER: _ClassVar[int]
    LASTPACKCONSUMED_FIELD_NUMBER: _ClassVar[int]
    MANUALCOMMITOFFSET_FIELD_NUMBER: _ClassVar[int]
    ESCFLOWCTRL_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    partitionId: int
    groupName: str
    topicName: str
    lastPackConsumed: bool
    manualCommitOffset: bool
    escFlowCtrl: bool
    def __init__(self, clientId: _Optional[str] = ..., partitionId: _Optional[int] = ..., groupName: _Optional[str] = ..., topicName: _Optional[str] = ..., lastPackConsumed: _Optional[bool] = ..., manualCommitOffset: _Optional[bool] = ..., escFlowCtrl: _Optional[bool] = ...) -> None: ...

class TransferedMessage(_message.Message):
    __slots__ = ("messageId", "checkSum", "payLoadData", "flag")
    MESSAGEID_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    PAYLOADDATA_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    messageId: int
    checkSum: int
    payLoadData: bytes
    flag: int
    def __init__(self, messageId: _Optional[int] = ..., checkSum: _Optional[int] = ..., payLoadData: _Optional[bytes] = ..., flag: _Optional[int] = ...) -> None: ...

class GetMessageResponseB2C(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "messages", "currOffset", "minLimitTime", "escFlowCtrl", "currDataDlt", "requireSlow", "maxOffset")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CURROFFSET_FIELD_NUMBER: _ClassVar[int]
    MINLIMITTIME_FIELD_NUMBER: _ClassVar[int]
    ESCFLOWCTRL_FIELD_NUMBER: _ClassVar[int]
    CURRDATADLT_FIELD_NUMBER: _ClassVar[int]
    REQUIRESLOW_FIELD_NUMBER: _ClassVar[int]
    MAXOFFSET_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    messages: _containers.RepeatedCompositeFieldContainer[TransferedMessage]
    currOffset: int
    minLimitTime: int
    escFlowCtrl: bool
    currDataDlt: int
    requireSlow: bool
    maxOffset: int
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[TransferedMessage, _Mapping]]] = ..., currOffset: _Optional[int] = ..., minLimitTime: _Optional[int] = ..., escFlowCtrl: _Optional[bool] = ..., currDataDlt: _Optional[int] = ..., requireSlow: _Optional[bool] = ..., maxOffset: _Optional[int] = ...) -> None: ...

class CommitOffsetRequestC2B(_message.Message):
    __slots__ = ("clientId", "topicName", "partitionId", "groupName", "lastPackConsumed")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    TOPICNAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    LASTPACKCONSUMED_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    topicName: str
    partitionId: int
    groupName: str
    lastPackConsumed: bool
    def __init__(self, clientId: _Optional[str] = ..., topicName: _Optional[str] = ..., partitionId: _Optional[int] = ..., groupName: _Optional[str] = ..., lastPackConsumed: _Optional[bool] = ...) -> None: ...

class CommitOffsetResponseB2C(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "currOffset", "maxOffset")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    CURROFFSET_FIELD_NUMBER: _ClassVar[int]
    MAXOFFSET_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    currOffset: int
    maxOffset: int
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., currOffset: _Optional[int] = ..., maxOffset: _Optional[int] = ...) -> None: ...
