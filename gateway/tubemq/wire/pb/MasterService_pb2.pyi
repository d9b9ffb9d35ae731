from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventProto(_message.Message):
    __slots__ = ("rebalanceId", "opType", "status", "subscribeInfo")
    REBALANCEID_FIELD_NUMBER: _ClassVar[int]
    OPTYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBEINFO_FIELD_NUMBER: _ClassVar[int]
    rebalanceId: int
    opType: int
    status: int
    subscribeInfo: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, rebalanceId: _Optional[int] = ..., opType: _Optional[int] = ..., status: _Optional[int] = ..., subscribeInfo: _Optional[_Iterable[str]] = ...) -> None: ...

class AuthenticateInfo(_message.Message):
    __slots__ = ("userName", "timestamp", "nonce", "othParams", "signature")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    OTHPARAMS_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    userName: str
    timestamp: int
    nonce: int
    othParams: str
    signature: str
    def __init__(self, userName: _Optional[str] = ..., timestamp: _Optional[int] = ..., nonce: _Optional[int] = ..., othParams: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class MasterCertificateInfo(_message.Message):
    __slots__ = ("authInfo", "authorizedToken")
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDTOKEN_FIELD_NUMBER: _ClassVar[int]
    authInfo: AuthenticateInfo
    authorizedToken: str
    def __init__(self, authInfo: _Optional[_Union[AuthenticateInfo, _Mapping]] = ..., authorizedToken: _Optional[str] = ...) -> None: ...

class MasterAuthorizedInfo(_message.Message):
    __slots__ = ("visitAuthorizedToken", "authAuthorizedToken")
    VISITAUTHORIZEDTOKEN_FIELD_NUMBER: _ClassVar[int]
    AUTHAUTHORIZEDTOKEN_FIELD_NUMBER: _ClassVar[int]
    visitAuthorizedToken: int
    authAuthorizedToken: str
    def __init__(self, visitAuthorizedToken: _Optional[int] = ..., authAuthorizedToken: _Optional[str] = ...) -> None: ...

class ApprovedClientConfig(_message.Message):
    __slots__ = ("configId", "maxMsgSize")
    CONFIGID_FIELD_NUMBER: _ClassVar[int]
    MAXMSGSIZE_FIELD_NUMBER: _ClassVar[int]
    configId: int
    maxMsgSize: int
    def __init__(self, configId: _Optional[int] = ..., maxMsgSize: _Optional[int] = ...) -> None: ...

class RegisterRequestP2M(_message.Message):
    __slots__ = ("clientId", "topicList", "brokerCheckSum", "hostName", "authInfo", "jdkVersion", "appdConfig")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    TOPICLIST_FIELD_NUMBER: _ClassVar[int]
    BROKERCHECKSUM_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    JDKVERSION_FIELD_NUMBER: _ClassVar[int]
    APPDCONFIG_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    topicList: _containers.RepeatedScalarFieldContainer[str]
    brokerCheckSum: int
    hostName: str
    authInfo: MasterCertificateInfo
    jdkVersion: str
    appdConfig: ApprovedClientConfig
    def __init__(self, clientId: _Optional[str] = ..., topicList: _Optional[_Iterable[str]] = ..., brokerCheckSum: _Optional[int] = ..., hostName: _Optional[str] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ..., jdkVersion: _Optional[str] = ..., appdConfig: _Optional[_Union[ApprovedClientConfig, _Mapping]] = ...) -> None: ...

class RegisterResponseM2P(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "brokerCheckSum", "brokerInfos", "authorizedInfo", "appdConfig")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    BROKERCHECKSUM_FIELD_NUMBER: _ClassVar[int]
    BROKERINFOS_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    APPDCONFIG_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    brokerCheckSum: int
    brokerInfos: _containers.RepeatedScalarFieldContainer[str]
    authorizedInfo: MasterAuthorizedInfo
    appdConfig: ApprovedClientConfig
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., brokerCheckSum: _Optional[int] = ..., brokerInfos: _Optional[_Iterable[str]] = ..., authorizedInfo: _Optional[_Union[MasterAuthorizedInfo, _Mapping]] = ..., appdConfig: _Optional[_Union[ApprovedClientConfig, _Mapping]] = ...) -> None: ...

class HeartRequestP2M(_message.Message):
    __slots__ = ("clientId", "brokerCheckSum", "hostName", "topicList", "authInfo", "appdConfig")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    BROKERCHECKSUM_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    TOPICLIST_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    APPDCONFIG_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    brokerCheckSum: int
    hostName: str
    topicList: _containers.RepeatedScalarFieldContainer[str]
    authInfo: MasterCertificateInfo
    appdConfig: ApprovedClientConfig
    def __init__(self, clientId: _Optional[str] = ..., brokerCheckSum: _Optional[int] = ..., hostName: _Optional[str] = ..., topicList: _Optional[_Iterable[str]] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ..., appdConfig: _Optional[_Union[ApprovedClientConfig, _Mapping]] = ...) -> None: ...

class HeartResponseM2P(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "brokerCheckSum", "topicInfos", "brokerInfos", "requireAuth", "authorizedInfo", "appdConfig")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    BROKERCHECKSUM_FIELD_NUMBER: _ClassVar[int]
    TOPICINFOS_FIELD_NUMBER: _ClassVar[int]
    BROKERINFOS_FIELD_NUMBER: _ClassVar[int]
    REQUIREAUTH_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    APPDCONFIG_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    brokerCheckSum: int
    topicInfos: _containers.RepeatedScalarFieldContainer[str]
    brokerInfos: _containers.RepeatedScalarFieldContainer[str]
    requireAuth: bool
    authorizedInfo: MasterAuthorizedInfo
    appdConfig: ApprovedClientConfig
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., brokerCheckSum: _Optional[int] = ..., topicInfos: _Optional[_Iterable[str]] = ..., brokerInfos: _Optional[_Iterable[str]] = ..., requireAuth: _Optional[bool] = ..., authorizedInfo: _Optional[_Union[MasterAuthorizedInfo, _Mapping]] = ..., appdConfig: _Optional[_Union[ApprovedClientConfig, _Mapping]] = ...) -> None: ...

class CloseRequestP2M(_message.Message):
    __slots__ = ("clientId", "authInfo")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    authInfo: MasterCertificateInfo
    def __init__(self, clientId: _Optional[str] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ...) -> None: ...

class CloseResponseM2P(_message.Message):
    __slots__ = ("success", "errCode", "errMsg")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ...) -> None: ...

class RegisterRequestC2M(_message.Message):
    __slots__ = ("clientId", "groupName", "hostName", "topicList", "subscribeInfo", "topicCondition", "requireBound", "sessionTime", "sessionKey", "totalCount", "requiredPartition", "notAllocated", "selectBig", "groupFlowCheckId", "defFlowCheckId", "ssdStoreId", "qryPriorityId", "authInfo", "jdkVersion")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    TOPICLIST_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBEINFO_FIELD_NUMBER: _ClassVar[int]
    TOPICCONDITION_FIELD_NUMBER: _ClassVar[int]
    REQUIREBOUND_FIELD_NUMBER: _ClassVar[int]
    SESSIONTIME_FIELD_NUMBER: _ClassVar[int]
    SESSIONKEY_FIELD_NUMBER: _ClassVar[int]
    TOTALCOUNT_FIELD_NUMBER: _ClassVar[int]
    REQUIREDPARTITION_FIELD_NUMBER: _ClassVar[int]
    NOTALLOCATED_FIELD_NUMBER: _ClassVar[int]
    SELECTBIG_FIELD_NUMBER: _ClassVar[int]
    GROUPFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    DEFFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    JDKVERSION_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    groupName: str
    hostName: str
    topicList: _containers.RepeatedScalarFieldContainer[str]
    subscribeInfo: _containers.RepeatedScalarFieldContainer[str]
    topicCondition: _containers.RepeatedScalarFieldContainer[str]
    requireBound: bool
    sessionTime: int
    sessionKey: str
    totalCount: int
    requiredPartition: str
    notAllocated: bool
    selectBig: bool
    groupFlowCheckId: int
    defFlowCheckId: int
    ssdStoreId: int
    qryPriorityId: int
    authInfo: MasterCertificateInfo
    jdkVersion: str
    def __init__(self, clientId: _Optional[str] = ..., groupName: _Optional[str] = ..., hostName: _Optional[str] = ..., topicList: _Optional[_Iterable[str]] = ..., subscribeInfo: _Optional[_Iterable[str]] = ..., topicCondition: _Optional[_Iterable[str]] = ..., requireBound: _Optional[bool] = ..., sessionTime: _Optional[int] = ..., sessionKey: _Optional[str] = ..., totalCount: _Optional[int] = ..., requiredPartition: _Optional[str] = ..., notAllocated: _Optional[bool] = ..., selectBig: _Optional[bool] = ..., groupFlowCheckId: _Optional[int] = ..., defFlowCheckId: _Optional[int] = ..., ssdStoreId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ..., jdkVersion: _Optional[str] = ...) -> None: ...

class RegisterResponseM2C(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "topicInfo", "notAllocated", "defFlowCheckId", "defFlowControlInfo", "groupFlowCheckId", "groupFlowControlInfo", "ssdStoreId", "qryPriorityId", "authorizedInfo")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    TOPICINFO_FIELD_NUMBER: _ClassVar[int]
    NOTALLOCATED_FIELD_NUMBER: _ClassVar[int]
    DEFFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    DEFFLOWCONTROLINFO_FIELD_NUMBER: _ClassVar[int]
    GROUPFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    GROUPFLOWCONTROLINFO_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    topicInfo: _containers.RepeatedScalarFieldContainer[str]
    notAllocated: bool
    defFlowCheckId: int
    defFlowControlInfo: str
    groupFlowCheckId: int
    groupFlowControlInfo: str
    ssdStoreId: int
    qryPriorityId: int
    authorizedInfo: MasterAuthorizedInfo
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., topicInfo: _Optional[_Iterable[str]] = ..., notAllocated: _Optional[bool] = ..., defFlowCheckId: _Optional[int] = ..., defFlowControlInfo: _Optional[str] = ..., groupFlowCheckId: _Optional[int] = ..., groupFlowControlInfo: _Optional[str] = ..., ssdStoreId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., authorizedInfo: _Optional[_Union[MasterAuthorizedInfo, _Mapping]] = ...) -> None: ...

class HeartRequestC2M(_message.Message):
    __slots__ = ("clientId", "groupName", "subscribeInfo", "reportSubscribeInfo", "event", "defFlowCheckId", "groupFlowCheckId", "ssdStoreId", "qryPriorityId", "authInfo")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBEINFO_FIELD_NUMBER: _ClassVar[int]
    REPORTSUBSCRIBEINFO_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    DEFFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    GROUPFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    groupName: str
    subscribeInfo: _containers.RepeatedScalarFieldContainer[str]
    reportSubscribeInfo: bool
    event: EventProto
    defFlowCheckId: int
    groupFlowCheckId: int
    ssdStoreId: int
    qryPriorityId: int
    authInfo: MasterCertificateInfo
    def __init__(self, clientId: _Optional[str] = ..., groupName: _Optional[str] = ..., subscribeInfo: _Optional[_Iterable[str]] = ..., reportSubscribeInfo: _Optional[bool] = ..., event: _Optional[_Union[EventProto, _Mapping]] = ..., defFlowCheckId: _Optional[int] = ..., groupFlowCheckId: _Optional[int] = ..., ssdStoreId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ...) -> None: ...

class HeartResponseM2C(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "event", "notAllocated", "defFlowCheckId", "defFlowControlInfo", "groupFlowCheckId", "groupFlowControlInfo", "ssdStoreId", "qryPriorityId", "requireAuth", "authorizedInfo")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    NOTALLOCATED_FIELD_NUMBER: _ClassVar[int]
    DEFFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    DEFFLOWCONTROLINFO_FIELD_NUMBER: _ClassVar[int]
    GROUPFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    GROUPFLOWCONTROLINFO_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    REQUIREAUTH_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    event: EventProto
    notAllocated: bool
    defFlowCheckId: int
    defFlowControlInfo: str
    groupFlowCheckId: int
    groupFlowControlInfo: str
    ssdStoreId: int
    qryPriorityId: int
    requireAuth: bool
    authorizedInfo: MasterAuthorizedInfo
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., event: _Optional[_Union[EventProto, _Mapping]] = ..., notAllocated: _Optional[bool] = ..., defFlowCheckId: _Optional[int] = ..., defFlowControlInfo: _Optional[str] = ..., groupFlowCheckId: _Optional[int] = ..., groupFlowControlInfo: _Optional[str] = ..., ssdStoreId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., requireAuth: _Optional[bool] = ..., authorizedInfo: _Optional[_Union[MasterAuthorizedInfo, _Mapping]] = ...) -> None: ...

class CloseRequestC2M(_message.Message):
    __slots__ = ("clientId", "groupName", "authInfo")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    groupName: str
    authInfo: MasterCertificateInfo
    def __init__(self, clientId: _Optional[str] = ..., groupName: _Optional[str] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ...) -> None: ...

class CloseResponseM2C(_message.Message):
    __slots__ = ("success", "errCode", "errMsg")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ...) -> None: ...

class ClientSubRepInfo(_message.Message):
    __slots__ = ("brokerConfigId", "topicMetaInfoId", "lstAssignedTime", "reportSubInfo", "partSubInfo")
    BROKERCONFIGID_FIELD_NUMBER: _ClassVar[int]
    TOPICMETAINFOID_FIELD_NUMBER: _ClassVar[int]
    LSTASSIGNEDTIME_FIELD_NUMBER: _ClassVar[int]
    REPORTSUBINFO_FIELD_NUMBER: _ClassVar[int]
    PARTSUBINFO_FIELD_NUMBER: _ClassVar[int]
    brokerConfigId: int
    topicMetaInfoId: int
    lstAssignedTime: int
    reportSubInfo: bool
    partSubInfo: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, brokerConfigId: _Optional[int] = ..., topicMetaInfoId: _Optional[int] = ..., lstAssignedTime: _Optional[int] = ..., reportSubInfo: _Optional[bool] = ..., partSubInfo: _Optional[_Iterable[str]] = ...) -> None: ...

class OpsTaskInfo(_message.Message):
    __slots__ = ("groupFlowCheckId", "defFlowCheckId", "qryPriorityId", "csmFrmMaxOffsetCtrlId", "requireAuth", "defFlowControlInfo", "groupFlowControlInfo")
    GROUPFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    DEFFLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    CSMFRMMAXOFFSETCTRLID_FIELD_NUMBER: _ClassVar[int]
    REQUIREAUTH_FIELD_NUMBER: _ClassVar[int]
    DEFFLOWCONTROLINFO_FIELD_NUMBER: _ClassVar[int]
    GROUPFLOWCONTROLINFO_FIELD_NUMBER: _ClassVar[int]
    groupFlowCheckId: int
    defFlowCheckId: int
    qryPriorityId: int
    csmFrmMaxOffsetCtrlId: int
    requireAuth: bool
    defFlowControlInfo: str
    groupFlowControlInfo: str
    def __init__(self, groupFlowCheckId: _Optional[int] = ..., defFlowCheckId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., csmFrmMaxOffsetCtrlId: _Optional[int] = ..., requireAuth: _Optional[bool] = ..., defFlowControlInfo: _Optional[str] = ..., groupFlowControlInfo: _Optional[str] = ...) -> None: ...

class RegisterRequestC2MV2(_message.Message):
    __slots__ = ("clientId", "groupName", "hostName", "sourceCount", "nodeId", "topicList", "topicCondition", "subRepInfo", "opsTaskInfo", "authInfo", "jdkVersion")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    SOURCECOUNT_FIELD_NUMBER: _ClassVar[int]
    NODEID_FIELD_NUMBER: _ClassVar[int]
    TOPICLIST_FIELD_NUMBER: _ClassVar[int]
    TOPICCONDITION_FIELD_NUMBER: _ClassVar[int]
    SUBREPINFO_FIELD_NUMBER: _ClassVar[int]
    OPSTASKINFO_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    JDKVERSION_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    groupName: str
    hostName: str
    sourceCount: int
    nodeId: int
    topicList: _containers.RepeatedScalarFieldContainer[str]
    topicCondition: _containers.RepeatedScalarFieldContainer[str]
    subRepInfo: ClientSubRepInfo
    opsTaskInfo: OpsTaskInfo
    authInfo: MasterCertificateInfo
    jdkVersion: str
    def __init__(self, clientId: _Optional[str] = ..., groupName: _Optional[str] = ..., hostName: _Optional[str] = ..., sourceCount: _Optional[int] = ..., nodeId: _Optional[int] = ..., topicList: _Optional[_Iterable[str]] = ..., topicCondition: _Optional[_Iterable[str]] = ..., subRepInfo: _Optional[_Union[ClientSubRepInfo, _Mapping]] = ..., opsTaskInfo: _Optional[_Union[OpsTaskInfo, _Mapping]] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ..., jdkVersion: _Optional[str] = ...) -> None: ...

class RegisterResponseM2CV2(_message.Message):
    __slots__ = ("errCode", "errMsg", "brokerConfigId", "brokerConfigList", "opsTaskInfo", "authorizedInfo")
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    BROKERCONFIGID_FIELD_NUMBER: _ClassVar[int]
    BROKERCONFIGLIST_FIELD_NUMBER: _ClassVar[int]
    OPSTASKINFO_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    errCode: int
    errMsg: str
    brokerConfigId: int
    brokerConfigList: _containers.RepeatedScalarFieldContainer[str]
    opsTaskInfo: OpsTaskInfo
    authorizedInfo: MasterAuthorizedInfo
    def __init__(self, errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., brokerConfigId: _Optional[int] = ..., brokerConfigList: _Optional[_Iterable[str]] = ..., opsTaskInfo: _Optional[_Union[OpsTaskInfo, _Mapping]] = ..., authorizedInfo: _Optional[_Union[MasterAuthorizedInfo, _Mapping]] = ...) -> None: ...

class HeartRequestC2MV2(_message.Message):
    __slots__ = ("clientId", "groupName", "subRepInfo", "opsTaskInfo", "authInfo")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    SUBREPINFO_FIELD_NUMBER: _ClassVar[int]
    OPSTASKINFO_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    groupName: str
    subRepInfo: ClientSubRepInfo
    opsTaskInfo: OpsTaskInfo
    authInfo: MasterCertificateInfo
    def __init__(self, clientId: _Optional[str] = ..., groupName: _Optional[str] = ..., subRepInfo: _Optional[_Union[ClientSubRepInfo, _Mapping]] = ..., opsTaskInfo: _Optional[_Union[OpsTaskInfo, _Mapping]] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ...) -> None: ...

class HeartResponseM2CV2(_message.Message):
    __slots__ = ("errCode", "errMsg", "brokerConfigId", "brokerConfigList", "topicMetaInfoId", "topicMetaInfoList", "opsTaskInfo", "authorizedInfo")
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    BROKERCONFIGID_FIELD_NUMBER: _ClassVar[int]
    BROKERCONFIGLIST_FIELD_NUMBER: _ClassVar[int]
    TOPICMETAINFOID_FIELD_NUMBER: _ClassVar[int]
    TOPICMETAINFOLIST_FIELD_NUMBER: _ClassVar[int]
    OPSTASKINFO_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    errCode: int
    errMsg: str
    brokerConfigId: int
    brokerConfigList: _containers.RepeatedScalarFieldContainer[str]
    topicMetaInfoId: int
    topicMetaInfoList: _containers.RepeatedScalarFieldContainer[str]
    opsTaskInfo: OpsTaskInfo
    authorizedInfo: MasterAuthorizedInfo
    def __init__(self, errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., brokerConfigId: _Optional[int] = ..., brokerConfigList: _Optional[_Iterable[str]] = ..., topicMetaInfoId: _Optional[int] = ..., topicMetaInfoList: _Optional[_Iterable[str]] = ..., opsTaskInfo: _Optional[_Union[OpsTaskInfo, _Mapping]] = ..., authorizedInfo: _Optional[_Union[MasterAuthorizedInfo, _Mapping]] = ...) -> None: ...

class GetPartMetaRequestC2M(_message.Message):
    __slots__ = ("clientId", "groupName", "brokerConfigId", "topicMetaInfoId", "authInfo")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    GROUPNAME_FIELD_NUMBER: _ClassVar[int]
    BROKERCONFIGID_FIELD_NUMBER: _ClassVar[int]
    TOPICMETAINFOID_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    groupName: str
    brokerConfigId: int
    topicMetaInfoId: int
    authInfo: MasterCertificateInfo
    def __init__(self, clientId: _Optional[str] = ..., groupName: _Optional[str] = ..., brokerConfigId: _Optional[int] = ..., topicMetaInfoId: _Optional[int] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ...) -> None: ...

class GetPartMetaResponseM2C(_message.Message):
    __slots__ = ("errCode", "errMsg", "brokerConfigId", "topicMetaInfoId", "topicMetaInfoList", "brokerConfigList")
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    BROKERCONFIGID_FIELD_NUMBER: _ClassVar[int]
    TOPICMETAINFOID_FIELD_NUMBER: _ClassVar[int]
    TOPICMETAINFOLIST_FIELD_NUMBER: _ClassVar[int]
    BROKERCONFIGLIST_FIELD_NUMBER: _ClassVar[int]
    errCode: int
    errMsg: str
    brokerConfigId: int
    topicMetaInfoId: int
    topicMetaInfoList: _containers.RepeatedScalarFieldContainer[str]
    brokerConfigList: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., brokerConfigId: _Optional[int] = ..., topicMetaInfoId: _Optional[int] = ..., topicMetaInfoList: _Optional[_Iterable[str]] = ..., brokerConfigList: _Optional[_Iterable[str]] = ...) -> None: ...

class EnableBrokerFunInfo(_message.Message):
    __slots__ = ("enableConsumeAuthenticate", "enableConsumeAuthorize", "enableProduceAuthenticate", "enableProduceAuthorize", "enableVisitTokenCheck")
    ENABLECONSUMEAUTHENTICATE_FIELD_NUMBER: _ClassVar[int]
    ENABLECONSUMEAUTHORIZE_FIELD_NUMBER: _ClassVar[int]
    ENABLEPRODUCEAUTHENTICATE_FIELD_NUMBER: _ClassVar[int]
    ENABLEPRODUCEAUTHORIZE_FIELD_NUMBER: _ClassVar[int]
    ENABLEVISITTOKENCHECK_FIELD_NUMBER: _ClassVar[int]
    enableConsumeAuthenticate: bool
    enableConsumeAuthorize: bool
    enableProduceAuthenticate: bool
    enableProduceAuthorize: bool
    enableVisitTokenCheck: bool
    def __init__(self, enableConsumeAuthenticate: _Optional[bool] = ..., enableConsumeAuthorize: _Optional[bool] = ..., enableProduceAuthenticate: _Optional[bool] = ..., enableProduceAuthorize: _Optional[bool] = ..., enableVisitTokenCheck: _Optional[bool] = ...) -> None: ...

class MasterBrokerAuthorizedInfo(_message.Message):
    __slots__ = ("visitAuthorizedToken", "authAuthorizedToken")
    VISITAUTHORIZEDTOKEN_FIELD_NUMBER: _ClassVar[int]
    AUTHAUTHORIZEDTOKEN_FIELD_NUMBER: _ClassVar[int]
    visitAuthorizedToken: str
    authAuthorizedToken: str
    def __init__(self, visitAuthorizedToken: _Optional[str] = ..., authAuthorizedToken: _Optional[str] = ...) -> None: ...

class ClusterConfig(_message.Message):
    __slots__ = ("configId", "maxMsgSize")
    CONFIGID_FIELD_NUMBER: _ClassVar[int]
    MAXMSGSIZE_FIELD_NUMBER: _ClassVar[int]
    configId: int
    maxMsgSize: int
    def __init__(self, configId: _Optional[int] = ..., maxMsgSize: _Optional[int] = ...) -> None: ...

class RegisterRequestB2M(_message.Message):
    __slots__ = ("clientId", "brokerOnline", "enableTls", "readStatusRpt", "writeStatusRpt", "curBrokerConfId", "confCheckSumId", "brokerDefaultConfInfo", "brokerTopicSetConfInfo", "ssdStoreId", "flowCheckId", "qryPriorityId", "tlsPort", "authInfo", "clsConfig")
    CLIENTID_FIELD_NUMBER: _ClassVar[int]
    BROKERONLINE_FIELD_NUMBER: _ClassVar[int]
    ENABLETLS_FIELD_NUMBER: _ClassVar[int]
    READSTATUSRPT_FIELD_NUMBER: _ClassVar[int]
    WRITESTATUSRPT_FIELD_NUMBER: _ClassVar[int]
    CURBROKERCONFID_FIELD_NUMBER: _ClassVar[int]
    CONFCHECKSUMID_FIELD_NUMBER: _ClassVar[int]
    BROKERDEFAULTCONFINFO_FIELD_NUMBER: _ClassVar[int]
    BROKERTOPICSETCONFINFO_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    FLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    TLSPORT_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    CLSCONFIG_FIELD_NUMBER: _ClassVar[int]
    clientId: str
    brokerOnline: bool
    enableTls: bool
    readStatusRpt: int
    writeStatusRpt: int
    curBrokerConfId: int
    confCheckSumId: int
    brokerDefaultConfInfo: str
    brokerTopicSetConfInfo: _containers.RepeatedScalarFieldContainer[str]
    ssdStoreId: int
    flowCheckId: int
    qryPriorityId: int
    tlsPort: int
    authInfo: MasterCertificateInfo
    clsConfig: ClusterConfig
    def __init__(self, clientId: _Optional[str] = ..., brokerOnline: _Optional[bool] = ..., enableTls: _Optional[bool] = ..., readStatusRpt: _Optional[int] = ..., writeStatusRpt: _Optional[int] = ..., curBrokerConfId: _Optional[int] = ..., confCheckSumId: _Optional[int] = ..., brokerDefaultConfInfo: _Optional[str] = ..., brokerTopicSetConfInfo: _Optional[_Iterable[str]] = ..., ssdStoreId: _Optional[int] = ..., flowCheckId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., tlsPort: _Optional[int] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ..., clsConfig: _Optional[_Union[ClusterConfig, _Mapping]] = ...) -> None: ...

class RegisterResponseM2B(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "stopRead", "stopWrite", "takeConfInfo", "enableBrokerInfo", "curBrokerConfId", "confCheckSumId", "brokerDefaultConfInfo", "brokerTopicSetConfInfo", "ssdStoreId", "flowCheckId", "flowControlInfo", "qryPriorityId", "authorizedInfo", "brokerAuthorizedInfo", "clsConfig")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    STOPREAD_FIELD_NUMBER: _ClassVar[int]
    STOPWRITE_FIELD_NUMBER: _ClassVar[int]
    TAKECONFINFO_FIELD_NUMBER: _ClassVar[int]
    ENABLEBROKERINFO_FIELD_NUMBER: _ClassVar[int]
    CURBROKERCONFID_FIELD_NUMBER: _ClassVar[int]
    CONFCHECKSUMID_FIELD_NUMBER: _ClassVar[int]
    BROKERDEFAULTCONFINFO_FIELD_NUMBER: _ClassVar[int]
    BROKERTOPICSETCONFINFO_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    FLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    FLOWCONTROLINFO_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    BROKERAUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    CLSCONFIG_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    stopRead: bool
    stopWrite: bool
    takeConfInfo: bool
    enableBrokerInfo: EnableBrokerFunInfo
    curBrokerConfId: int
    confCheckSumId: int
    brokerDefaultConfInfo: str
    brokerTopicSetConfInfo: _containers.RepeatedScalarFieldContainer[str]
    ssdStoreId: int
    flowCheckId: int
    flowControlInfo: str
    qryPriorityId: int
    authorizedInfo: MasterAuthorizedInfo
    brokerAuthorizedInfo: MasterBrokerAuthorizedInfo
    clsConfig: ClusterConfig
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., stopRead: _Optional[bool] = ..., stopWrite: _Optional[bool] = ..., takeConfInfo: _Optional[bool] = ..., enableBrokerInfo: _Optional[_Union[EnableBrokerFunInfo, _Mapping]] = ..., curBrokerConfId: _Optional[int] = ..., confCheckSumId: _Optional[int] = ..., brokerDefaultConfInfo: _Optional[str] = ..., brokerTopicSetConfInfo: _Optional[_Iterable[str]] = ..., ssdStoreId: _Optional[int] = ..., flowCheckId: _Optional[int] = ..., flowControlInfo: _Optional[str] = ..., qryPriorityId: _Optional[int] = ..., authorizedInfo: _Optional[_Union[MasterAuthorizedInfo, _Mapping]] = ..., brokerAuthorizedInfo: _Optional[_Union[MasterBrokerAuthorizedInfo, _Mapping]] = ..., clsConfig: _Optional[_Union[ClusterConfig, _Mapping]] = ...) -> None: ...

class HeartRequestB2M(_message.Message):
    __slots__ = ("brokerId", "brokerOnline", "readStatusRpt", "writeStatusRpt", "curBrokerConfId", "confCheckSumId", "takeConfInfo", "takeRemovedTopicInfo", "brokerDefaultConfInfo", "brokerTopicSetConfInfo", "removedTopicsInfo", "ssdStoreId", "flowCheckId", "qryPriorityId", "authInfo", "clsConfig")
    BROKERID_FIELD_NUMBER: _ClassVar[int]
    BROKERONLINE_FIELD_NUMBER: _ClassVar[int]
    READSTATUSRPT_FIELD_NUMBER: _ClassVar[int]
    WRITESTATUSRPT_FIELD_NUMBER: _ClassVar[int]
    CURBROKERCONFID_FIELD_NUMBER: _ClassVar[int]
    CONFCHECKSUMID_FIELD_NUMBER: _ClassVar[int]
    TAKECONFINFO_FIELD_NUMBER: _ClassVar[int]
    TAKEREMOVEDTOPICINFO_FIELD_NUMBER: _ClassVar[int]
    BROKERDEFAULTCONFINFO_FIELD_NUMBER: _ClassVar[int]
    BROKERTOPICSETCONFINFO_FIELD_NUMBER: _ClassVar[int]
    REMOVEDTOPICSINFO_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    FLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    CLSCONFIG_FIELD_NUMBER: _ClassVar[int]
    brokerId: str
    brokerOnline: bool
    readStatusRpt: int
    writeStatusRpt: int
    curBrokerConfId: int
    confCheckSumId: int
    takeConfInfo: bool
    takeRemovedTopicInfo: bool
    brokerDefaultConfInfo: str
    brokerTopicSetConfInfo: _containers.RepeatedScalarFieldContainer[str]
    removedTopicsInfo: _containers.RepeatedScalarFieldContainer[str]
    ssdStoreId: int
    flowCheckId: int
    qryPriorityId: int
    authInfo: MasterCertificateInfo
    clsConfig: ClusterConfig
    def __init__(self, brokerId: _Optional[str] = ..., brokerOnline: _Optional[bool] = ..., readStatusRpt: _Optional[int] = ..., writeStatusRpt: _Optional[int] = ..., curBrokerConfId: _Optional[int] = ..., confCheckSumId: _Optional[int] = ..., takeConfInfo: _Optional[bool] = ..., takeRemovedTopicInfo: _Optional[bool] = ..., brokerDefaultConfInfo: _Optional[str] = ..., brokerTopicSetConfInfo: _Optional[_Iterable[str]] = ..., removedTopicsInfo: _Optional[_Iterable[str]] = ..., ssdStoreId: _Optional[int] = ..., flowCheckId: _Optional[int] = ..., qryPriorityId: _Optional[int] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ..., clsConfig: _Optional[_Union[ClusterConfig, _Mapping]] = ...) -> None: ...

class HeartResponseM2B(_message.Message):
    __slots__ = ("success", "errCode", "errMsg", "stopRead", "stopWrite", "curBrokerConfId", "confCheckSumId", "needReportData", "takeConfInfo", "takeRemoveTopicInfo", "brokerDefaultConfInfo", "brokerTopicSetConfInfo", "removeTopicConfInfo", "ssdStoreId", "flowCheckId", "flowControlInfo", "qryPriorityId", "authorizedInfo", "brokerAuthorizedInfo", "clsConfig")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    STOPREAD_FIELD_NUMBER: _ClassVar[int]
    STOPWRITE_FIELD_NUMBER: _ClassVar[int]
    CURBROKERCONFID_FIELD_NUMBER: _ClassVar[int]
    CONFCHECKSUMID_FIELD_NUMBER: _ClassVar[int]
    NEEDREPORTDATA_FIELD_NUMBER: _ClassVar[int]
    TAKECONFINFO_FIELD_NUMBER: _ClassVar[int]
    TAKEREMOVETOPICINFO_FIELD_NUMBER: _ClassVar[int]
    BROKERDEFAULTCONFINFO_FIELD_NUMBER: _ClassVar[int]
    BROKERTOPICSETCONFINFO_FIELD_NUMBER: _ClassVar[int]
    REMOVETOPICCONFINFO_FIELD_NUMBER: _ClassVar[int]
    SSDSTOREID_FIELD_NUMBER: _ClassVar[int]
    FLOWCHECKID_FIELD_NUMBER: _ClassVar[int]
    FLOWCONTROLINFO_FIELD_NUMBER: _ClassVar[int]
    QRYPRIORITYID_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    BROKERAUTHORIZEDINFO_FIELD_NUMBER: _ClassVar[int]
    CLSCONFIG_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    stopRead: bool
    stopWrite: bool
    curBrokerConfId: int
    confCheckSumId: int
    needReportData: bool
    takeConfInfo: bool
    takeRemoveTopicInfo: bool
    brokerDefaultConfInfo: str
    brokerTopicSetConfInfo: _containers.RepeatedScalarFieldContainer[str]
    removeTopicConfInfo: _containers.RepeatedScalarFieldContainer[str]
    ssdStoreId: int
    flowCheckId: int
    flowControlInfo: str
    qryPriorityId: int
    authorizedInfo: MasterAuthorizedInfo
    brokerAuthorizedInfo: MasterBrokerAuthorizedInfo
    clsConfig: ClusterConfig
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ..., stopRead: _Optional[bool] = ..., stopWrite: _Optional[bool] = ..., curBrokerConfId: _Optional[int] = ..., confCheckSumId: _Optional[int] = ..., needReportData: _Optional[bool] = ..., takeConfInfo: _Optional[bool] = ..., takeRemoveTopicInfo: _Optional[bool] = ..., brokerDefaultConfInfo: _Optional[str] = ..., brokerTopicSetConfInfo: _Optional[_Iterable[str]] = ..., removeTopicConfInfo: _Optional[_Iterable[str]] = ..., ssdStoreId: _Optional[int] = ..., flowCheckId: _Optional[int] = ..., flowControlInfo: _Optional[str] = ..., qryPriorityId: _Optional[int] = ..., authorizedInfo: _Optional[_Union[MasterAuthorizedInfo, _Mapping]] = ..., brokerAuthorizedInfo: _Optional[_Union[MasterBrokerAuthorizedInfo, _Mapping]] = ..., clsConfig: _Optional[_Union[ClusterConfig, _Mapping]] = ...) -> None: ...

class CloseRequestB2M(_message.Message):
    __slots__ = ("brokerId", "authInfo")
    BROKERID_FIELD_NUMBER: _ClassVar[int]
    AUTHINFO_FIELD_NUMBER: _ClassVar[int]
    brokerId: str
    authInfo: MasterCertificateInfo
    def __init__(self, brokerId: _Optional[str] = ..., authInfo: _Optional[_Union[MasterCertificateInfo, _Mapping]] = ...) -> None: ...

class CloseResponseM2B(_message.Message):
    __slots__ = ("success", "errCode", "errMsg")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERRCODE_FIELD_NUMBER: _ClassVar[int]
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    success: bool
    errCode: int
    errMsg: str
    def __init__(self, success: _Optional[bool] = ..., errCode: _Optional[int] = ..., errMsg: _Optional[str] = ...) -> None: ...
