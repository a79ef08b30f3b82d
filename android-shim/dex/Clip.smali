# pincer-clip: puts the text on its standard input on Android's clipboard, so that
# `input keyevent KEYCODE_PASTE` can type it into the focused field. Android's
# `input text` types ASCII only; this is how the shim types everything else.
#
# Run by the shim as the adb shell user, with no APK:
#     CLASSPATH=/data/local/tmp/.../pincer-clip.dex app_process / org.pincer.Clip
# The text comes on stdin as UTF-8, never in argv: app_process hands argv to Java through
# JNI's Modified UTF-8, which mangles characters outside the Basic Multilingual Plane
# (emoji). Exit status 0 once the clip is set; otherwise the reason on stderr and 1.
#
# Dalvik assembly for smali 2.5.2 (Debian's libsmali-java); `pincer-clip.dex` next to it
# is its output, `smali assemble -o pincer-clip.dex Clip.smali`, checked by a test.
# Everything of Android's that is not public API (ServiceManager, IClipboard) is reached by
# reflection, so the dex links against nothing hidden and its class verifies anywhere.

.class public final Lorg/pincer/Clip;
.super Ljava/lang/Object;
.source "Clip.smali"


# main(String[] args): the arguments are not read.
.method public static main([Ljava/lang/String;)V
    .locals 3

    :try_start
    invoke-static {}, Lorg/pincer/Clip;->readStdin()Ljava/lang/String;
    move-result-object v0

    invoke-static {}, Lorg/pincer/Clip;->clipboard()Ljava/lang/Object;
    move-result-object v1

    invoke-static {v1, v0}, Lorg/pincer/Clip;->setPrimaryClip(Ljava/lang/Object;Ljava/lang/String;)V
    :try_end
    .catch Ljava/lang/Throwable; {:try_start .. :try_end} :failed

    const/4 v0, 0x0
    invoke-static {v0}, Ljava/lang/System;->exit(I)V
    return-void

    :failed
    move-exception v0

    # A method called through reflection wraps what it threw: report that instead.
    instance-of v1, v0, Ljava/lang/reflect/InvocationTargetException;
    if-eqz v1, :report
    invoke-virtual {v0}, Ljava/lang/Throwable;->getCause()Ljava/lang/Throwable;
    move-result-object v1
    if-eqz v1, :report
    move-object v0, v1

    :report
    new-instance v1, Ljava/lang/StringBuilder;
    invoke-direct {v1}, Ljava/lang/StringBuilder;-><init>()V
    const-string v2, "pincer-clip: cannot set the clipboard: "
    invoke-virtual {v1, v2}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    invoke-virtual {v1, v0}, Ljava/lang/StringBuilder;->append(Ljava/lang/Object;)Ljava/lang/StringBuilder;
    invoke-virtual {v1}, Ljava/lang/StringBuilder;->toString()Ljava/lang/String;
    move-result-object v1
    sget-object v2, Ljava/lang/System;->err:Ljava/io/PrintStream;
    invoke-virtual {v2, v1}, Ljava/io/PrintStream;->println(Ljava/lang/String;)V

    const/4 v0, 0x1
    invoke-static {v0}, Ljava/lang/System;->exit(I)V
    return-void
.end method


# All of standard input, decoded as UTF-8.
.method private static readStdin()Ljava/lang/String;
    .locals 5

    new-instance v0, Ljava/io/ByteArrayOutputStream;
    invoke-direct {v0}, Ljava/io/ByteArrayOutputStream;-><init>()V
    const/16 v1, 0x2000
    new-array v1, v1, [B
    sget-object v2, Ljava/lang/System;->in:Ljava/io/InputStream;
    const/4 v4, 0x0

    :read
    invoke-virtual {v2, v1}, Ljava/io/InputStream;->read([B)I
    move-result v3
    # -1 at the end of the input.
    if-ltz v3, :end
    invoke-virtual {v0, v1, v4, v3}, Ljava/io/ByteArrayOutputStream;->write([BII)V
    goto :read

    :end
    invoke-virtual {v0}, Ljava/io/ByteArrayOutputStream;->toByteArray()[B
    move-result-object v1
    new-instance v2, Ljava/lang/String;
    const-string v3, "UTF-8"
    invoke-direct {v2, v1, v3}, Ljava/lang/String;-><init>([BLjava/lang/String;)V
    return-object v2
.end method


# The clipboard service's interface:
#     IClipboard.Stub.asInterface(ServiceManager.getService("clipboard"))
.method private static clipboard()Ljava/lang/Object;
    .locals 6

    const/4 v3, 0x0

    # ServiceManager.getService("clipboard"): the service's binder, or null.
    const-string v0, "android.os.ServiceManager"
    invoke-static {v0}, Ljava/lang/Class;->forName(Ljava/lang/String;)Ljava/lang/Class;
    move-result-object v0
    const-string v1, "getService"
    const/4 v2, 0x1
    new-array v2, v2, [Ljava/lang/Class;
    const-class v4, Ljava/lang/String;
    aput-object v4, v2, v3
    invoke-virtual {v0, v1, v2}, Ljava/lang/Class;->getMethod(Ljava/lang/String;[Ljava/lang/Class;)Ljava/lang/reflect/Method;
    move-result-object v0
    const/4 v1, 0x1
    new-array v1, v1, [Ljava/lang/Object;
    const-string v4, "clipboard"
    aput-object v4, v1, v3
    const/4 v2, 0x0
    invoke-virtual {v0, v2, v1}, Ljava/lang/reflect/Method;->invoke(Ljava/lang/Object;[Ljava/lang/Object;)Ljava/lang/Object;
    move-result-object v5
    if-nez v5, :found

    new-instance v0, Ljava/lang/IllegalStateException;
    const-string v1, "there is no clipboard service (ServiceManager.getService(\"clipboard\") is null)"
    invoke-direct {v0, v1}, Ljava/lang/IllegalStateException;-><init>(Ljava/lang/String;)V
    throw v0

    # IClipboard.Stub.asInterface(binder): the service's methods over that binder.
    :found
    const-string v0, "android.content.IClipboard$Stub"
    invoke-static {v0}, Ljava/lang/Class;->forName(Ljava/lang/String;)Ljava/lang/Class;
    move-result-object v0
    const-string v1, "asInterface"
    const/4 v2, 0x1
    new-array v2, v2, [Ljava/lang/Class;
    const-string v4, "android.os.IBinder"
    invoke-static {v4}, Ljava/lang/Class;->forName(Ljava/lang/String;)Ljava/lang/Class;
    move-result-object v4
    aput-object v4, v2, v3
    invoke-virtual {v0, v1, v2}, Ljava/lang/Class;->getMethod(Ljava/lang/String;[Ljava/lang/Class;)Ljava/lang/reflect/Method;
    move-result-object v0
    const/4 v1, 0x1
    new-array v1, v1, [Ljava/lang/Object;
    aput-object v5, v1, v3
    const/4 v2, 0x0
    invoke-virtual {v0, v2, v1}, Ljava/lang/reflect/Method;->invoke(Ljava/lang/Object;[Ljava/lang/Object;)Ljava/lang/Object;
    move-result-object v0
    return-object v0
.end method


# clipboard.setPrimaryClip(ClipData.newPlainText("pincer", text), ...), whose parameters
# changed over Android's versions:
#     API <= 28  (ClipData clip, String callingPackage)
#     API 29-32  (ClipData clip, String callingPackage, int userId)
#     API 33     (ClipData clip, String callingPackage, String attributionTag, int userId)
#     API 34+    (ClipData clip, String callingPackage, String attributionTag, int userId,
#                 int deviceId)
# so the method is found by its name and its parameters are filled by their type: the clip;
# the first String is the calling package, the shell's own "com.android.shell" (the service
# checks it belongs to the caller); later Strings (the attribution tag) are null; ints (the
# user, the device) are 0, the system user and the default device. A parameter of any other
# type is a version this helper does not know: it fails saying so rather than guess.
.method private static setPrimaryClip(Ljava/lang/Object;Ljava/lang/String;)V
    .locals 12
    # p0: the clipboard interface; p1: the text.
    # v0: the clip; v1: IClipboard's methods; v2: how many; v3: which one is looked at;
    # v4: setPrimaryClip; v5: its parameter types; v6: how many; v7: the arguments;
    # v8: which parameter is filled; v9: whether the calling package was given;
    # v10: the parameter's type; v11: scratch.

    const-string v1, "pincer"
    invoke-static {v1, p1}, Landroid/content/ClipData;->newPlainText(Ljava/lang/CharSequence;Ljava/lang/CharSequence;)Landroid/content/ClipData;
    move-result-object v0

    const-string v1, "android.content.IClipboard"
    invoke-static {v1}, Ljava/lang/Class;->forName(Ljava/lang/String;)Ljava/lang/Class;
    move-result-object v1
    invoke-virtual {v1}, Ljava/lang/Class;->getMethods()[Ljava/lang/reflect/Method;
    move-result-object v1
    array-length v2, v1
    const/4 v3, 0x0

    :next_method
    if-ge v3, v2, :no_method
    aget-object v4, v1, v3
    invoke-virtual {v4}, Ljava/lang/reflect/Method;->getName()Ljava/lang/String;
    move-result-object v5
    const-string v6, "setPrimaryClip"
    invoke-virtual {v6, v5}, Ljava/lang/String;->equals(Ljava/lang/Object;)Z
    move-result v5
    if-nez v5, :fill
    add-int/lit8 v3, v3, 0x1
    goto :next_method

    :no_method
    new-instance v0, Ljava/lang/IllegalStateException;
    const-string v1, "android.content.IClipboard has no setPrimaryClip method"
    invoke-direct {v0, v1}, Ljava/lang/IllegalStateException;-><init>(Ljava/lang/String;)V
    throw v0

    :fill
    invoke-virtual {v4}, Ljava/lang/reflect/Method;->getParameterTypes()[Ljava/lang/Class;
    move-result-object v5
    array-length v6, v5
    new-array v7, v6, [Ljava/lang/Object;
    const/4 v8, 0x0
    const/4 v9, 0x0

    :next_parameter
    if-ge v8, v6, :call
    aget-object v10, v5, v8

    const-class v11, Landroid/content/ClipData;
    if-ne v10, v11, :not_clip
    aput-object v0, v7, v8
    goto :filled

    :not_clip
    const-class v11, Ljava/lang/String;
    if-ne v10, v11, :not_string
    # Later Strings stay null.
    if-nez v9, :filled
    const-string v11, "com.android.shell"
    aput-object v11, v7, v8
    const/4 v9, 0x1
    goto :filled

    :not_string
    sget-object v11, Ljava/lang/Integer;->TYPE:Ljava/lang/Class;
    if-ne v10, v11, :unknown
    const/4 v11, 0x0
    invoke-static {v11}, Ljava/lang/Integer;->valueOf(I)Ljava/lang/Integer;
    move-result-object v11
    aput-object v11, v7, v8

    :filled
    add-int/lit8 v8, v8, 0x1
    goto :next_parameter

    :unknown
    new-instance v0, Ljava/lang/StringBuilder;
    invoke-direct {v0}, Ljava/lang/StringBuilder;-><init>()V
    const-string v1, "cannot fill a parameter of type "
    invoke-virtual {v0, v1}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    invoke-virtual {v10}, Ljava/lang/Class;->getName()Ljava/lang/String;
    move-result-object v1
    invoke-virtual {v0, v1}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    const-string v1, " of "
    invoke-virtual {v0, v1}, Ljava/lang/StringBuilder;->append(Ljava/lang/String;)Ljava/lang/StringBuilder;
    invoke-virtual {v0, v4}, Ljava/lang/StringBuilder;->append(Ljava/lang/Object;)Ljava/lang/StringBuilder;
    invoke-virtual {v0}, Ljava/lang/StringBuilder;->toString()Ljava/lang/String;
    move-result-object v1
    new-instance v0, Ljava/lang/IllegalStateException;
    invoke-direct {v0, v1}, Ljava/lang/IllegalStateException;-><init>(Ljava/lang/String;)V
    throw v0

    :call
    invoke-virtual {v4, p0, v7}, Ljava/lang/reflect/Method;->invoke(Ljava/lang/Object;[Ljava/lang/Object;)Ljava/lang/Object;
    return-void
.end method
